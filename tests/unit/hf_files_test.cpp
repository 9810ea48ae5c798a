// Hugging Face files in and out: the safetensors reader on good and broken files, the sharded
// directory writer, and open_hf_model's checks of a model directory — each bad file an error
// naming the file and the tensor, before anything is built, and a failed export writing nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/hf_directory_writer.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_reader.h"
#include "models/llama/hf_model_dir.h"
#include "zero/error.h"

namespace fs = std::filesystem;
using namespace zero::checkpoint;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("zero_hf_files_test." + std::to_string(getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Writes tensors (float values i * 0.5 + k) with our writer; returns the entries.
std::vector<SafetensorsEntry> write_floats(const fs::path& path, const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, shape] : tensors) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    entries.push_back({name, "F32", shape, static_cast<uint64_t>(4 * n)});
  }
  SafetensorsWriter w(path.string(), entries, {{"format", "pt"}});
  for (size_t k = 0; k < entries.size(); ++k) {
    std::vector<float> v(entries[k].bytes / 4);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f + static_cast<float>(k);
    w.append(v.data(), 4 * v.size());
  }
  w.finish();
  return entries;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a header text and a data section as given.
void write_raw(const fs::path& p, const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write_bytes(p, bytes + header + data);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const zero::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(SafetensorsReader, ReadsWhatTheWriterWrote) {
  const fs::path dir = scratch("roundtrip");
  write_floats(dir / "a.safetensors", {{"x", {2, 3}}, {"y", {5}}, {"empty", {0, 4}}});
  SafetensorsFile f((dir / "a.safetensors").string());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_NE(f.find("y"), nullptr);
  EXPECT_EQ(f.find("y")->shape, std::vector<int64_t>{5});
  const auto* y = static_cast<const float*>(f.data(*f.find("y")));
  EXPECT_EQ(y[3], 1.5f + 1.0f);
  EXPECT_EQ(f.find("empty")->numel(), 0);
  EXPECT_EQ(f.find("nope"), nullptr);
}

TEST(SafetensorsReader, BrokenFilesAreErrorsNamingFileAndTensor) {
  const fs::path dir = scratch("broken");
  const fs::path good = dir / "good.safetensors";
  write_floats(good, {{"x", {4, 4}}, {"y", {8}}});
  const std::string bytes = read_bytes(good);

  const fs::path truncated = dir / "truncated.safetensors";
  write_bytes(truncated, bytes.substr(0, bytes.size() - 5));
  std::string e = error_of([&] { SafetensorsFile f(truncated.string()); });
  EXPECT_NE(e.find(truncated.string()), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;

  const fs::path short_file = dir / "short.safetensors";
  write_bytes(short_file, "abc");
  EXPECT_NE(error_of([&] { SafetensorsFile f(short_file.string()); }).find("truncated"), std::string::npos);

  const fs::path huge_header = dir / "huge.safetensors";
  std::string h = bytes;
  h[5] = 0x7f;  // a header length of petabytes
  write_bytes(huge_header, h);
  EXPECT_NE(error_of([&] { SafetensorsFile f(huge_header.string()); }).find("bad header"), std::string::npos);

  const fs::path not_json = dir / "not_json.safetensors";
  write_raw(not_json, "{\"x\": {\"dtype\": \"F32\", ", std::string(16, '\0'));
  EXPECT_NE(error_of([&] { SafetensorsFile f(not_json.string()); }).find("not JSON"), std::string::npos);

  const fs::path gap = dir / "gap.safetensors";
  write_raw(gap, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
            std::string(12, '\0'));
  e = error_of([&] { SafetensorsFile f(gap.string()); });
  EXPECT_NE(e.find("tensor b"), std::string::npos) << e;

  const fs::path wrong_size = dir / "wrong_size.safetensors";
  write_raw(wrong_size, R"({"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})", std::string(4, '\0'));
  e = error_of([&] { SafetensorsFile f(wrong_size.string()); });
  EXPECT_NE(e.find("tensor a"), std::string::npos) << e;
  EXPECT_NE(e.find("3 elements of BF16"), std::string::npos) << e;

  const fs::path bad_dtype = dir / "bad_dtype.safetensors";
  write_raw(bad_dtype, R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  EXPECT_NE(error_of([&] { SafetensorsFile f(bad_dtype.string()); }).find("unknown dtype F33"), std::string::npos);
}

TEST(SafetensorsModel, TheIndexIsCheckedBothWays) {
  const fs::path dir = scratch("index");
  write_floats(dir / "model-00001-of-00002.safetensors", {{"a", {2}}, {"b", {3}}});
  write_floats(dir / "model-00002-of-00002.safetensors", {{"c", {4}}});
  auto index = [&](const nlohmann::json& map) {
    write_bytes(dir / "model.safetensors.index.json", nlohmann::json{{"metadata", {{"total_size", 36}}}, {"weight_map", map}}.dump());
  };
  index({{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00001-of-00002.safetensors"}, {"c", "model-00002-of-00002.safetensors"}});
  SafetensorsModel m(dir.string());
  EXPECT_TRUE(m.sharded());
  EXPECT_EQ(m.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(m.total_bytes(), 36u);

  index({{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00001-of-00002.safetensors"}, {"c", "model-00003-of-00002.safetensors"}});
  std::string e = error_of([&] { SafetensorsModel bad(dir.string()); });
  EXPECT_NE(e.find("missing shard"), std::string::npos) << e;
  EXPECT_NE(e.find("model-00003-of-00002.safetensors"), std::string::npos) << e;

  index({{"a", "model-00001-of-00002.safetensors"}, {"c", "model-00002-of-00002.safetensors"}});
  e = error_of([&] { SafetensorsModel bad(dir.string()); });
  EXPECT_NE(e.find("tensor b"), std::string::npos) << e;
  EXPECT_NE(e.find("not in"), std::string::npos) << e;

  index({{"a", "model-00002-of-00002.safetensors"}, {"b", "model-00001-of-00002.safetensors"}, {"c", "model-00002-of-00002.safetensors"}});
  e = error_of([&] { SafetensorsModel bad(dir.string()); });
  EXPECT_NE(e.find("tensor a"), std::string::npos) << e;

  const fs::path empty = scratch("no_weights");
  e = error_of([&] { SafetensorsModel bad(empty.string()); });
  EXPECT_NE(e.find("no model.safetensors"), std::string::npos) << e;
}

TEST(HfDirectoryWriter, ShardsAsTransformersCutsThem) {
  std::vector<SafetensorsEntry> e = {{"a", "F32", {10}, 40}, {"b", "F32", {10}, 40}, {"c", "F32", {30}, 120}, {"d", "F32", {5}, 20}};
  HfDirectoryPlan one = plan_hf_directory(e, 0);
  EXPECT_EQ(one.files, std::vector<std::string>{"model.safetensors"});
  HfDirectoryPlan p = plan_hf_directory(e, 100);
  // a+b fit 100; c is larger than the limit and goes alone; d starts the third.
  EXPECT_EQ(p.files, (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                               "model-00003-of-00003.safetensors"}));
  EXPECT_EQ(p.file_of, (std::vector<std::string>{p.files[0], p.files[0], p.files[1], p.files[2]}));
  EXPECT_EQ(parse_shard_size("5GB"), 5000000000u);
  EXPECT_EQ(parse_shard_size("2GiB"), 2147483648u);
  EXPECT_EQ(parse_shard_size("500MB"), 500000000u);
  EXPECT_EQ(parse_shard_size("1234"), 1234u);
  EXPECT_THROW(parse_shard_size("5 parsecs"), zero::Error);
}

TEST(HfDirectoryWriter, WritesADirectoryTheReaderReadsAndNothingOnFailure) {
  const fs::path root = scratch("writer");
  const fs::path dir = root / "out";
  std::vector<SafetensorsEntry> e = {{"a", "F32", {10}, 40}, {"b", "F32", {10}, 40}, {"c", "F32", {3}, 12}};
  {
    HfDirectoryWriter w(dir.string(), e, 50);
    std::vector<float> v(10, 1.0f);
    w.append(v.data(), 40);
    w.append(v.data(), 40);
    w.append(v.data(), 12);
    w.add_file("config.json", "{}\n");
    w.finish();
  }
  SafetensorsModel m(dir.string());
  EXPECT_TRUE(m.sharded());
  EXPECT_EQ(m.names(), (std::vector<std::string>{"a", "b", "c"}));
  const auto index = nlohmann::json::parse(read_bytes(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 92);
  EXPECT_TRUE(fs::exists(dir / "config.json"));
  for (const auto& f : fs::directory_iterator(dir)) {
    if (f.path().extension() == ".safetensors")
      EXPECT_EQ(SafetensorsFile(f.path().string()).metadata().at("format"), "pt") << "transformers needs it";
  }

  // A second export that fails half way leaves the first as it was, and no staging folder.
  const std::string before = read_bytes(dir / "model-00001-of-00002.safetensors");
  EXPECT_THROW(
      {
        HfDirectoryWriter w(dir.string(), e, 0);
        std::vector<float> v(10, 2.0f);
        w.append(v.data(), 40);
        w.append(v.data(), 4);  // the wrong size
      },
      zero::Error);
  EXPECT_EQ(read_bytes(dir / "model-00001-of-00002.safetensors"), before);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  EXPECT_FALSE(fs::exists(root / "out.partial"));

  // A successful re-export with one file removes the old shards (no ambiguous directory).
  {
    HfDirectoryWriter w(dir.string(), e, 0);
    std::vector<float> v(10, 3.0f);
    w.append(v.data(), 40);
    w.append(v.data(), 40);
    w.append(v.data(), 12);
    w.finish();
  }
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir / "model-00001-of-00002.safetensors"));
}

namespace {

const char* kTinyLlama = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32,
  "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 2,
  "num_key_value_heads": 1, "max_position_embeddings": 32, "tie_word_embeddings": false})";

// A model directory of kTinyLlama written by our writer, with `change` applied to the tensor list.
fs::path tiny_model(const std::string& name,
                    const std::function<void(std::vector<std::pair<std::string, std::vector<int64_t>>>&)>& change = {}) {
  const fs::path dir = scratch(name);
  write_bytes(dir / "config.json", kTinyLlama);
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
  for (const auto& t : zero::llama::llama_tensors(zero::llama::parse_llama_config(nlohmann::json::parse(kTinyLlama), "x")))
    tensors.emplace_back(t.name, t.shape);
  if (change) change(tensors);
  write_floats(dir / "model.safetensors", tensors);
  return dir;
}

}  // namespace

TEST(OpenHfModel, AGoodDirectoryOpens) {
  const auto m = zero::llama::open_hf_model(tiny_model("good").string());
  EXPECT_EQ(m.config.num_key_value_heads, 1);
  EXPECT_EQ(m.weights_dtype, "F32");
  // What transformers ignores on load is ignored here too.
  const auto extra = zero::llama::open_hf_model(tiny_model("inv_freq", [](auto& t) {
                                                  t.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq",
                                                                 std::vector<int64_t>{4});
                                                }).string());
  EXPECT_FALSE(extra.weights->names().empty());
}

TEST(OpenHfModel, BadDirectoriesAreErrorsNamingTheTensor) {
  auto error = [](const fs::path& dir) { return error_of([&] { zero::llama::open_hf_model(dir.string()); }); };
  std::string e = error(tiny_model("missing", [](auto& t) { t.erase(t.begin() + 3); }));
  EXPECT_NE(e.find("model.layers.0.self_attn.k_proj.weight is missing"), std::string::npos) << e;

  e = error(tiny_model("unexpected", [](auto& t) { t.emplace_back("model.layers.0.self_attn.q_proj.lora_A", std::vector<int64_t>{2}); }));
  EXPECT_NE(e.find("unexpected tensor model.layers.0.self_attn.q_proj.lora_A"), std::string::npos) << e;

  e = error(tiny_model("shape", [](auto& t) { t[2].second = {16, 8}; }));
  EXPECT_NE(e.find("model.safetensors: tensor model.layers.0.self_attn.q_proj.weight has shape [16, 8], config.json "
                   "implies [16, 16]"),
            std::string::npos)
      << e;

  e = error(tiny_model("untied", [](auto& t) { t.pop_back(); }));
  EXPECT_NE(e.find("lm_head.weight is missing"), std::string::npos) << e;

  const fs::path truncated = tiny_model("truncated");
  const std::string bytes = read_bytes(truncated / "model.safetensors");
  write_bytes(truncated / "model.safetensors", bytes.substr(0, bytes.size() - 100));
  e = error(truncated);
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("lm_head.weight"), std::string::npos) << "the last tensor is the one cut: " << e;

  const fs::path int_weights = tiny_model("int_weights");
  {
    std::vector<SafetensorsEntry> entries;
    for (const auto& t : zero::llama::llama_tensors(zero::llama::parse_llama_config(nlohmann::json::parse(kTinyLlama), "x"))) {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      entries.push_back({t.name, "I32", t.shape, static_cast<uint64_t>(4 * n)});
    }
    SafetensorsWriter w((int_weights / "model.safetensors").string(), entries, {{"format", "pt"}});
    for (const auto& en : entries) w.append(std::string(en.bytes, '\0').data(), en.bytes);
    w.finish();
  }
  e = error(int_weights);
  EXPECT_NE(e.find("has dtype I32"), std::string::npos) << e;

  const fs::path bad_config = tiny_model("bad_config");
  write_bytes(bad_config / "config.json", R"({"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"]})");
  e = error(bad_config);
  EXPECT_NE(e.find("config.json: model_type: \"gpt_neox\""), std::string::npos) << e;

  const fs::path no_config = scratch("no_config");
  EXPECT_NE(error(no_config).find("config.json: missing"), std::string::npos);
}
