// Files from elsewhere (issue 37), torch-free: whatever the bytes, each reader ends with an error
// naming the file (and the key where there is one) in bounded time and memory — deep nesting in
// every JSON reader, devices and FIFOs where a regular file belongs, long inputs that took
// quadratic time (added tokens, a Split pattern that backtracks). The checkpoint's own
// containment cases are in tests/dist/engine_checkpoint_test.cpp (ManifestsFromElsewhereAreContained),
// the hostfile's in tests/unit/launch_plan_test.cpp (HostileFilesAreClearErrorsInBoundedTime).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/reader.h"
#include "checkpoint/safetensors_reader.h"
#include "launch/launch_plan.h"
#include "models/finetune/instruction_data.h"
#include "models/finetune/trainer_files.h"
#include "models/llama/llama_config.h"
#include "text/added_tokens.h"
#include "text/tokenizer.h"
#include "zero/error.h"

namespace fs = std::filesystem;

namespace {

// A fresh directory of its own for each test.
fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("zero_elsewhere_" + name + "." + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// `fn` must throw a zero::Error containing `says`, within 10 s (a bound, not a benchmark).
void expect_error(const std::string& what, const std::function<void()>& fn, const std::string& says) {
  const auto start = std::chrono::steady_clock::now();
  std::string error = "(no error)";
  try {
    fn();
  } catch (const zero::Error& e) {
    error = e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10) << what;
  EXPECT_NE(error.find(says), std::string::npos) << what << ": " << error;
}

// 100 000 levels: a 200 KB file that overflowed the stack of every recursive walk.
std::string nested(const std::string& open, const std::string& close, int depth = 100'000) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

int64_t peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace

TEST(FilesFromElsewhere, DeepNestingInEveryJsonReaderIsAnError) {
  const fs::path dir = scratch("deep");
  const std::string deep = "{\"a\": " + nested("[", "]") + "}";
  const std::string too_deep = ": JSON nested deeper than 128 levels";

  const fs::path config = dir / "config.json";
  write(config, deep);
  expect_error(
      "config.json", [&] { zero::llama::read_llama_config(config.string()); }, config.string() + too_deep);

  const fs::path tokenizer = dir / "tokenizer.json";
  write(tokenizer, "{\"model\": {\"type\": \"BPE\"}, \"pre_tokenizer\": " +
                       nested("{\"type\": \"Sequence\", \"pretokenizers\": [", "]}") + "}");
  expect_error(
      "tokenizer.json", [&] { zero::text::Tokenizer::load(tokenizer.string()); }, tokenizer.string() + too_deep);

  const fs::path shard = dir / "model.safetensors";
  const std::string header = "{\"__metadata__\": " + nested("[", "]") + "}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write(shard, bytes + header);
  expect_error(
      "safetensors header", [&] { zero::checkpoint::SafetensorsFile file(shard.string()); }, shard.string() + too_deep);

  const fs::path state = dir / "trainer_state.json";
  write(state, deep);
  expect_error(
      "trainer_state.json", [&] { zero::finetune::read_trainer_state(state.string()); }, state.string() + too_deep);

  fs::create_directories(dir / "ckpt" / "global_step1");
  write(dir / "ckpt" / "latest", "global_step1");
  const fs::path manifest = dir / "ckpt" / "global_step1" / "manifest.json";
  write(manifest, "{\"format\": \"zerocpp-checkpoint\", \"version\": 1, \"client_state\": " + nested("[", "]") + "}");
  expect_error(
      "checkpoint manifest", [&] { zero::checkpoint::CheckpointReader reader((dir / "ckpt").string()); },
      manifest.string() + too_deep);
  EXPECT_LT(peak_rss_kib(), 200 * 1024) << "KiB of peak RSS";
  fs::remove_all(dir);
}

// A number beyond a double (1e999) made nlohmann's parser throw out_of_range, which the readers
// catching parse_error let escape (the instruction-data fuzzer's finding): now an error naming the
// file in every JSON reader.
TEST(FilesFromElsewhere, NumbersBeyondADoubleAreErrorsNamingTheFile) {
  const fs::path dir = scratch("huge_number");
  const std::string out_of_range = ": a number out of range";

  const fs::path config = dir / "config.json";
  write(config, R"({"vocab_size": 1e999})");
  expect_error("config.json", [&] { zero::llama::read_llama_config(config.string()); }, config.string() + out_of_range);

  const fs::path state = dir / "trainer_state.json";
  write(state, R"({"global_step": 44444444444444444444444444444444e4444444444})");
  expect_error(
      "trainer_state.json", [&] { zero::finetune::read_trainer_state(state.string()); }, state.string() + out_of_range);

  // Instruction data, as a JSON array and as JSONL, read with a byte-level tokenizer.
  nlohmann::json vocab = nlohmann::json::object();
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = b;
  }
  fs::create_directories(dir / "tokenizer");
  write(dir / "tokenizer" / "tokenizer.json",
        nlohmann::json{{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()},
                                  {"byte_fallback", true}}}}
            .dump());
  const zero::text::Tokenizer tokenizer = zero::text::Tokenizer::load((dir / "tokenizer").string());
  const fs::path array = dir / "data.json";
  write(array, R"([{"instruction": "a", "output": 1e999}])");
  expect_error(
      "instruction data (array)", [&] { zero::finetune::read_instruction_data(array.string(), tokenizer, 64); },
      array.string() + out_of_range);
  const fs::path lines = dir / "data.jsonl";
  write(lines, "{\"instruction\": \"a\", \"output\": \"b\"}\n{\"messages\": 1e999}\n");
  expect_error(
      "instruction data (JSONL)", [&] { zero::finetune::read_instruction_data(lines.string(), tokenizer, 64); },
      lines.string() + ":2" + out_of_range);
  fs::remove_all(dir);
}

// A few hundred bytes that asked for gigabytes: an id of 1e8 sized a table of 1e8 tokens (3.1 GB);
// an id of 2^40 + 1 wrapped to 1. Both are errors naming the key, before anything is sized.
TEST(FilesFromElsewhere, TokenIdsAreCheckedBeforeTheyAreUsed) {
  const fs::path dir = scratch("ids");
  const auto tokenizer_with = [&](const std::string& vocab_id, const std::string& added_id) {
    const fs::path file = dir / "tokenizer.json";
    write(file, R"({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, "b": )" + vocab_id +
                    R"(}, "merges": []}, "added_tokens": [{"id": )" + added_id +
                    R"(, "content": "<s>", "special": true}]})");
    return file.string();
  };
  const std::string big = tokenizer_with("100000000", "2");
  expect_error(
      "vocab id 1e8", [&] { zero::text::Tokenizer::load(big); },
      "tokenizer.json: model.vocab[\"b\"]: id 100000000 is not in [0, 1048578)");
  const std::string wraps = tokenizer_with("1099511627777", "2");
  expect_error(
      "vocab id 2^40+1", [&] { zero::text::Tokenizer::load(wraps); }, "id 1099511627777 is not in [0,");
  const std::string added = tokenizer_with("1", "4294967297");
  expect_error(
      "added id 2^32+1", [&] { zero::text::Tokenizer::load(added); }, "added_tokens[0].id: 4294967297 is not in [0,");
  EXPECT_NO_THROW(zero::text::Tokenizer::load(tokenizer_with("1", "2")));
  // A field of the wrong type is an error naming its key, not nlohmann's "type must be boolean".
  const fs::path typed = dir / "typed.json";
  write(typed, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "byte_fallback": "yes"}})");
  expect_error(
      "byte_fallback a string", [&] { zero::text::Tokenizer::load(typed.string()); },
      "model.byte_fallback: has the wrong type (\"yes\")");
  write(typed, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [[1, 2]]}})");
  expect_error(
      "a merge of numbers", [&] { zero::text::Tokenizer::load(typed.string()); }, "model.merges[0]: expected");
  write(typed, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
      "added_tokens": [{"id": 1, "content": "<s>", "special": 1}]})");
  expect_error(
      "special a number", [&] { zero::text::Tokenizer::load(typed.string()); },
      "added_tokens[0].special: has the wrong type (1)");
  EXPECT_LT(peak_rss_kib(), 200 * 1024) << "KiB of peak RSS";
  fs::remove_all(dir);
}

// A config.json of a few hundred bytes that asked for a table of 10^8 layers.
TEST(FilesFromElsewhere, ModelConfigSizesAreBounded) {
  const fs::path dir = scratch("config");
  const fs::path config = dir / "config.json";
  write(config, R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 64, "hidden_size": 16,
      "intermediate_size": 32, "num_hidden_layers": 100000000, "num_attention_heads": 2, "num_key_value_heads": 1})");
  expect_error(
      "num_hidden_layers 1e8", [&] { zero::llama::read_llama_config(config.string()); },
      "num_hidden_layers: 100000000 is more than 4096");
  // Found by the config.json fuzzer (fuzz/seeds/model_config/finding-dtype-false.json): a field of
  // the wrong type, top level or nested, is an error naming it.
  write(config, R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": false})");
  expect_error(
      "dtype false", [&] { zero::llama::read_llama_config(config.string()); }, "dtype: has the wrong type");
  write(config, R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "rope_scaling": {"rope_type": "llama3", "factor": "8"}})");
  expect_error(
      "rope_scaling.factor a string", [&] { zero::llama::read_llama_config(config.string()); },
      "rope_scaling.factor: has the wrong type");
  // The second finding (finding-vocab-size-2e21.json): a number past int64's range was converted
  // to it (undefined behaviour); it is the wrong type now, as is a fraction.
  write(config,
        R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 2222222222222222249152})");
  expect_error(
      "vocab_size 2.2e21", [&] { zero::llama::read_llama_config(config.string()); },
      "vocab_size: has the wrong type (2.2222222222222222e+21)");
  write(config, R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64.5})");
  expect_error(
      "hidden_size 64.5", [&] { zero::llama::read_llama_config(config.string()); },
      "hidden_size: has the wrong type (64.5)");
  EXPECT_LT(peak_rss_kib(), 200 * 1024) << "KiB of peak RSS";
  fs::remove_all(dir);
}

TEST(FilesFromElsewhere, DevicesAndFifosAreNotRegularFiles) {
  const fs::path dir = scratch("special");
  // A config.json linked to /dev/zero (which never ends), and a FIFO (whose open blocks).
  const fs::path config = dir / "config.json";
  fs::create_symlink("/dev/zero", config);
  expect_error(
      "config.json -> /dev/zero", [&] { zero::llama::read_llama_config(config.string()); },
      config.string() + ": is a device, not a regular file");
  fs::remove(config);
  ASSERT_EQ(mkfifo(config.c_str(), 0600), 0);
  expect_error(
      "config.json a FIFO", [&] { zero::llama::read_llama_config(config.string()); },
      config.string() + ": is a FIFO, not a regular file");

  fs::create_directories(dir / "ckpt" / "t");
  write(dir / "ckpt" / "latest", "t");
  ASSERT_EQ(mkfifo((dir / "ckpt" / "t" / "manifest.json").c_str(), 0600), 0);
  expect_error(
      "manifest a FIFO", [&] { zero::checkpoint::CheckpointReader reader((dir / "ckpt").string()); },
      "manifest.json: is a FIFO, not a regular file");

  const fs::path hosts = dir / "hostfile";
  ASSERT_EQ(mkfifo(hosts.c_str(), 0600), 0);
  expect_error(
      "hostfile a FIFO", [&] { zero::launch::read_hostfile(hosts.string()); },
      "the hostfile " + hosts.string() + " is not a regular file");

  // A text file larger than a text file of these formats may be (64 MiB): refused as it is read,
  // not held whole. (A sparse file: no disk is used.)
  const fs::path huge = dir / "huge.json";
  { std::ofstream(huge) << "{"; }
  fs::resize_file(huge, (uint64_t{64} << 20) + 1);
  expect_error(
      "a config.json over 64 MiB", [&] { zero::llama::read_llama_config(huge.string()); },
      huge.string() + ": larger than 67108864 bytes");
  EXPECT_LT(peak_rss_kib(), 200 * 1024) << "KiB of peak RSS";
  fs::remove_all(dir);
}

// The added tokens' one-pass matcher (an Aho–Corasick automaton over the reversed tokens) takes
// what the simple scan took, written out here: from the left, at each position the longest
// token that starts there (the first of equal ones), else one byte on. Random tokens and texts
// over three letters, so that tokens overlap, nest and repeat.
TEST(FilesFromElsewhere, AddedTokensMatchLeftmostLongest) {
  std::mt19937 random(5);
  const auto letters = [&](size_t n) {
    std::string s(n, 'a');
    for (char& c : s) c = "abc"[random() % 3];
    return s;
  };
  for (int round = 0; round < 500; ++round) {
    std::vector<std::string> tokens(1 + random() % 10);
    for (std::string& t : tokens) t = letters(random() % 5);
    const std::string text = letters(random() % 60);
    std::vector<zero::text::AddedTokenMatcher::Match> expected;
    for (size_t i = 0; i < text.size();) {
      int best = -1;
      for (size_t t = 0; t < tokens.size(); ++t)
        if (!tokens[t].empty() && text.compare(i, tokens[t].size(), tokens[t]) == 0 &&
            (best < 0 || tokens[t].size() > tokens[static_cast<size_t>(best)].size()))
          best = static_cast<int>(t);
      if (best < 0) {
        ++i;
        continue;
      }
      expected.push_back({i, i + tokens[static_cast<size_t>(best)].size(), best});
      i = expected.back().end;
    }
    const auto got = zero::text::AddedTokenMatcher(tokens).find_all(text);
    ASSERT_EQ(got.size(), expected.size()) << "round " << round << ": " << text;
    for (size_t m = 0; m < got.size(); ++m) {
      EXPECT_EQ(got[m].begin, expected[m].begin) << "round " << round;
      EXPECT_EQ(got[m].end, expected[m].end) << "round " << round;
      EXPECT_EQ(got[m].token, expected[m].token) << "round " << round;
    }
  }
}

// Ten times the inputs that took minutes, each well within the bounds:
//   - 50 000 added tokens with a common prefix over 10 MB of text (every token was tried at
//     every position);
//   - a Split pattern that backtracks over the rest of the text at every position (`a*b|a` over
//     10 MB of "a"): an error naming the pattern, from PCRE2's limits or the match budget.
TEST(FilesFromElsewhere, LongInputsTakeTimeInProportion) {
  const fs::path dir = scratch("long");
  std::string added = "[";
  for (int i = 0; i < 50'000; ++i) {
    char content[16];
    std::snprintf(content, sizeof content, "<t%05d>", i);
    added += std::string(i ? "," : "") + R"({"id": )" + std::to_string(13 + i) + R"(, "content": ")" + content +
             R"(", "special": true})";
  }
  added += "]";
  const fs::path many = dir / "tokenizer.json";
  write(many, R"({"model": {"type": "BPE", "vocab": {"<": 0, "t": 1, ">": 2, "0": 3, "1": 4, "2": 5, "3": 6,
      "4": 7, "5": 8, "6": 9, "7": 10, "8": 11, "9": 12}, "merges": []}, "added_tokens": )" +
                  added + "}");
  const zero::text::Tokenizer tokenizer = zero::text::Tokenizer::load(many.string());
  std::string text;
  int64_t units = 0;
  while (text.size() < 10'000'000) {
    char token[16];
    std::snprintf(token, sizeof token, "<t%05d>", static_cast<int>(units % 50'000));
    text += std::string("<t0000") + token;  // a near miss of every token, then a token
    ++units;
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tokenizer.encode(text, false);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10) << "added tokens";
  ASSERT_EQ(static_cast<int64_t>(ids.size()), units * 7);  // 6 characters of the near miss, then the token
  EXPECT_EQ(ids[6], 13);
  EXPECT_EQ(ids[13], 14);

  const fs::path backtracks = dir / "split.json";
  write(backtracks, R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
      "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a*b|a"}, "behavior": "Isolated", "invert": false}})");
  const zero::text::Tokenizer split = zero::text::Tokenizer::load(backtracks.string());
  EXPECT_EQ(split.encode("aab", false).size(), 3u);
  const std::string as(10'000'000, 'a');
  expect_error(
      "a*b|a over 10 MB", [&] { split.encode(as, false); }, "a*b|a");
  EXPECT_LT(peak_rss_kib(), 200 * 1024) << "KiB of peak RSS";
  fs::remove_all(dir);
}
