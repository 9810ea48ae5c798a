// config.json of the Llama family: the real files users have (tests/models/hf_configs/, public
// copies with their sources in SOURCES.tsv) all read, with the values that change the numbers;
// what zerocpp does not compute refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/llama/llama_config.h"
#include "zero/error.h"

using namespace zero::llama;
namespace fs = std::filesystem;

namespace {

LlamaConfig parse(const std::string& text) { return parse_llama_config(nlohmann::json::parse(text), "config.json"); }

std::string llama_config_error(const std::string& text) {
  try {
    parse(text);
  } catch (const zero::Error& e) {
    return e.what();
  }
  return "(no error)";
}

const std::string kBase = R"("architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 100,
  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4)";

}  // namespace

TEST(LlamaConfig, EveryRealConfigReads) {
  const fs::path dir = fs::path(ZERO_SOURCE_DIR) / "tests/models/hf_configs";
  int read = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".config.json")) continue;
    SCOPED_TRACE(name);
    const LlamaConfig c = read_llama_config(entry.path().string());
    ++read;
    EXPECT_GT(c.num_hidden_layers, 0);
    EXPECT_EQ(c.num_attention_heads % c.num_key_value_heads, 0);
    EXPECT_GT(llama_parameter_count(c), 0);
    // The published sizes: the tensor list's count is the model's parameter count.
    if (name.find("SmolLM2-135M") != std::string::npos) {
      EXPECT_TRUE(c.tie_word_embeddings);
      EXPECT_EQ(llama_parameter_count(c), 134515008);  // 134.5 M, as the model card's 135M
    }
    if (name.find("Llama-3.1-8B") != std::string::npos || name.find("Meta-Llama-3.1-8B") != std::string::npos) {
      EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
      EXPECT_EQ(c.rope_scaling.factor, 8.0);
      EXPECT_EQ(c.num_key_value_heads, 8);
      EXPECT_EQ(llama_parameter_count(c), 8030261248);  // Llama 3.1 8B: 8.03 B
    }
    if (c.family == Family::kQwen2) EXPECT_TRUE(c.qkv_bias && !c.o_bias);
    if (name.find("Mistral-7B-v0.1") != std::string::npos) EXPECT_EQ(c.sliding_window, 4096);
  }
  EXPECT_GE(read, 10) << "the corpus of real configs is missing";
}

TEST(LlamaConfig, DefaultsAreTransformers) {
  const LlamaConfig c = parse("{" + kBase + "}");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
  const LlamaConfig m = parse(R"({"model_type": "mistral", "num_attention_heads": 32, "hidden_size": 4096})");
  EXPECT_EQ(m.sliding_window, 4096) << "MistralConfig's default";
  EXPECT_EQ(m.num_key_value_heads, 8);
  EXPECT_EQ(parse(R"({"model_type": "mistral", "sliding_window": null})").sliding_window, 0);
  EXPECT_EQ(parse("{" + kBase + R"(, "head_dim": 32})").q_size(), 128) << "head_dim need not be hidden / heads";
}

TEST(LlamaConfig, WhatIsNotComputedIsRefusedByName) {
  EXPECT_NE(llama_config_error("{" + kBase + R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})").find("rope_scaling.rope_type"),
            std::string::npos);
  EXPECT_NE(llama_config_error("{" + kBase + R"(, "rope_scaling": {"type": "dynamic", "factor": 2.0}})").find("\"dynamic\""),
            std::string::npos);
  EXPECT_NE(llama_config_error("{" + kBase + R"(, "hidden_act": "gelu"})").find("hidden_act"), std::string::npos);
  EXPECT_NE(llama_config_error("{" + kBase + R"(, "attention_dropout": 0.1})").find("attention_dropout"), std::string::npos);
  EXPECT_NE(llama_config_error("{" + kBase + R"(, "pretraining_tp": 2})").find("pretraining_tp"), std::string::npos);
  EXPECT_NE(llama_config_error("{" + kBase + R"(, "quantization_config": {"bits": 4}})").find("quantization_config"),
            std::string::npos);
  EXPECT_NE(llama_config_error("{" + kBase + R"(, "mystery_knob": 3})").find("mystery_knob"), std::string::npos);
  EXPECT_NE(llama_config_error("{" + kBase + R"(, "num_key_value_heads": 3})").find("num_key_value_heads"), std::string::npos);
  EXPECT_NE(llama_config_error(R"({"model_type": "gemma"})").find("model_type: \"gemma\""), std::string::npos);
  EXPECT_NE(llama_config_error(R"({"model_type": "llama", "architectures": ["LlamaForSequenceClassification"]})")
                .find("architectures"),
            std::string::npos);
  EXPECT_NE(llama_config_error(R"({"model_type": "qwen2", "use_sliding_window": true})").find("use_sliding_window"),
            std::string::npos);
  EXPECT_NE(llama_config_error("{" + kBase + R"(, "rope_scaling": {"rope_type": "llama3"}})").find("rope_scaling.factor"),
            std::string::npos);
}

TEST(LlamaConfig, TensorNamesAreTransformers) {
  const LlamaConfig c = parse("{" + kBase + R"(, "attention_bias": true, "tie_word_embeddings": true})");
  const auto t = llama_tensors(c);
  EXPECT_EQ(t.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(t.back().name, "model.norm.weight") << "tied: no lm_head.weight";
  EXPECT_EQ(t[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(t[3].name, "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(hf_name("model.layers.12.block.mlp.up_proj.weight"), "model.layers.12.mlp.up_proj.weight");
  EXPECT_EQ(hf_name("model.embed_tokens.weight"), "model.embed_tokens.weight");
}
