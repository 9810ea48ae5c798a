// config.json of the Llama family: the real files users have (tests/models/hf_configs/, public
// copies with their sources in SOURCES.tsv) all read, with the values that change the numbers;
// what zerocpp does not compute refused by name.
#include <gtest/gtest.h>

#include <algorithm>
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
    if (name.find("Mixtral-8x7B") != std::string::npos) {
      EXPECT_EQ(c.moe.num_experts, 8);
      EXPECT_EQ(c.moe.experts_per_token, 2);
      EXPECT_EQ(c.sliding_window, 0);
      EXPECT_EQ(llama_parameter_count(c), 46702792704);  // Mixtral 8x7B: 46.7 B
    }
    if (name.find("Mixtral-8x22B") != std::string::npos) EXPECT_EQ(c.moe.expert_intermediate_size, 16384);
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

// Mixtral and Qwen2-MoE: transformers' defaults, which layers have experts, and the hub's names.
TEST(LlamaConfig, MixturesOfExpertsReadAsTransformersDoes) {
  const LlamaConfig mixtral = parse(R"({"model_type": "mixtral", "architectures": ["MixtralForCausalLM"]})");
  EXPECT_EQ(mixtral.family, Family::kMixtral);
  EXPECT_EQ(mixtral.moe.num_experts, 8);
  EXPECT_EQ(mixtral.moe.experts_per_token, 2);
  EXPECT_EQ(mixtral.moe.expert_intermediate_size, 14336);
  EXPECT_TRUE(mixtral.moe.normalize_top_k) << "Mixtral always renormalises the top k";
  EXPECT_EQ(mixtral.rope_theta, 1e6);
  EXPECT_EQ(mixtral.rms_norm_eps, 1e-5);
  EXPECT_EQ(mixtral.sliding_window, 0) << "MixtralConfig's default is None";
  EXPECT_FALSE(mixtral.moe.output_router_logits);
  EXPECT_EQ(mixtral.moe.router_aux_loss_coef, 0.001);
  EXPECT_TRUE(mixtral.is_moe_layer(0) && mixtral.is_moe_layer(31));
  EXPECT_EQ(llama_parameter_count(mixtral), 46702792704) << "Mixtral-8x7B: 46.7 B";

  const LlamaConfig qwen = parse(R"({"model_type": "qwen2_moe", "num_hidden_layers": 6, "decoder_sparse_step": 2,
                                     "mlp_only_layers": [3]})");
  EXPECT_EQ(qwen.moe.num_experts, 60);
  EXPECT_EQ(qwen.moe.experts_per_token, 4);
  EXPECT_EQ(qwen.moe.expert_intermediate_size, 1408);
  EXPECT_EQ(qwen.moe.shared_expert_intermediate_size, 5632);
  EXPECT_FALSE(qwen.moe.normalize_top_k) << "Qwen2MoeConfig's norm_topk_prob default";
  EXPECT_TRUE(qwen.qkv_bias);
  // (layer + 1) % decoder_sparse_step == 0 and not in mlp_only_layers.
  const std::vector<bool> moe_layers = {false, true, false, false, false, true};
  for (int l = 0; l < 6; ++l) EXPECT_EQ(qwen.is_moe_layer(l), moe_layers[static_cast<size_t>(l)]) << "layer " << l;

  const auto names = [](const LlamaConfig& c) {
    std::vector<std::string> out;
    for (const auto& t : llama_tensors(c)) out.push_back(t.name);
    return out;
  };
  const auto m = names(parse(R"({"model_type": "mixtral", "num_hidden_layers": 1, "num_local_experts": 2})"));
  for (const char* expected : {"model.layers.0.block_sparse_moe.gate.weight", "model.layers.0.block_sparse_moe.experts.1.w1.weight",
                               "model.layers.0.block_sparse_moe.experts.1.w2.weight"})
    EXPECT_NE(std::find(m.begin(), m.end(), expected), m.end()) << expected;
  const auto q = names(qwen);
  for (const char* expected : {"model.layers.0.mlp.gate_proj.weight", "model.layers.1.mlp.gate.weight",
                               "model.layers.1.mlp.experts.59.down_proj.weight", "model.layers.1.mlp.shared_expert.up_proj.weight",
                               "model.layers.1.mlp.shared_expert_gate.weight", "model.layers.3.mlp.up_proj.weight"})
    EXPECT_NE(std::find(q.begin(), q.end(), expected), q.end()) << expected;
  EXPECT_EQ(hf_name("model.layers.1.block.block_sparse_moe.experts.3.w3.weight"),
            "model.layers.1.block_sparse_moe.experts.3.w3.weight");
}

TEST(LlamaConfig, MixturesOfExpertsRefuseWhatIsNotComputed) {
  EXPECT_NE(llama_config_error(R"({"model_type": "mixtral", "router_jitter_noise": 0.1})").find("router_jitter_noise"),
            std::string::npos);
  EXPECT_NE(llama_config_error(R"({"model_type": "mixtral", "num_experts_per_tok": 9})").find("num_experts_per_tok: 9"),
            std::string::npos);
  EXPECT_NE(llama_config_error(R"({"model_type": "qwen2_moe", "decoder_sparse_step": 0})").find("decoder_sparse_step"),
            std::string::npos);
  EXPECT_NE(llama_config_error(R"({"model_type": "qwen2_moe", "num_hidden_layers": 2, "mlp_only_layers": [5]})")
                .find("mlp_only_layers: 5 is not a layer"),
            std::string::npos);
  EXPECT_NE(llama_config_error(R"({"model_type": "qwen2_moe", "num_experts": 0})").find("num_experts"), std::string::npos);
  // Sizes from a stranger's file bounded before any table is built.
  EXPECT_NE(llama_config_error(R"({"model_type": "mixtral", "num_hidden_layers": 4096, "num_local_experts": 4096})")
                .find("more than 65536 experts in all"),
            std::string::npos);
  EXPECT_NE(llama_config_error(R"({"model_type": "qwen2_moe", "shared_expert_intermediate_size": 1e12})")
                .find("shared_expert_intermediate_size"),
            std::string::npos);
}
