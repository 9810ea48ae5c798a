// A Hugging Face `config.json` of the Llama decoder family (LlamaForCausalLM: Llama 2, 3, 3.1,
// 3.2; MistralForCausalLM; Qwen2ForCausalLM; and with mixtures of experts MixtralForCausalLM and
// Qwen2MoeForCausalLM), read with transformers' defaults for each model_type
// (configuration_llama.py, configuration_mistral.py, configuration_qwen2.py,
// configuration_mixtral.py, configuration_qwen2_moe.py).
//
// Every field is read, or known to leave the training numbers alone (token ids, generation
// settings, bookkeeping), or refused by name: a value zerocpp does not compute (rope_scaling types
// other than llama3 and linear, hidden_act other than silu, attention dropout, quantization,
// Qwen2's sliding window) and a field it does not know are errors naming the file and the field,
// so a model is never trained silently wrong. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zero::llama {

enum class Family { kLlama, kMistral, kQwen2, kMixtral, kQwen2Moe };

// Mixtures of experts (Mixtral, Qwen2-MoE): a router picks each token's top-k experts (SwiGLU
// MLPs) of a MoE layer, whose outputs are summed weighted by the router's probabilities.
struct MoeConfig {
  int64_t num_experts = 0;  // 0: every layer dense
  int64_t experts_per_token = 0;
  int64_t expert_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;  // Qwen2-MoE's shared expert; 0: none
  bool normalize_top_k = false;                 // the k weights renormalised to sum to 1
  int64_t decoder_sparse_step = 1;              // Qwen2-MoE: every step-th layer has experts
  std::vector<int64_t> mlp_only_layers;         // Qwen2-MoE: dense whatever the step
  // The load-balancing loss (router_aux_loss_coef x load_balancing_loss_func) joins the loss.
  bool output_router_logits = false;
  double router_aux_loss_coef = 0.001;
};

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 } type = Type::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;       // llama3
};

struct LlamaConfig {
  Family family = Family::kLlama;
  std::string model_type, architecture;  // as the file says ("llama", "LlamaForCausalLM")
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool qkv_bias = false;   // Llama: attention_bias; Qwen2: always
  bool o_bias = false;     // Llama: attention_bias; Mistral and Qwen2: never
  bool mlp_bias = false;   // Llama only
  bool tie_word_embeddings = false;
  // Mistral: a query attends to the `sliding_window` latest keys, itself included (0: no window).
  int64_t sliding_window = 0;
  // transformers makes it the embedding's padding_idx: that row of embed_tokens gets no gradient
  // through the input embedding (tied, it still gets one through the logits). -1: none.
  int64_t pad_token_id = -1;
  std::string torch_dtype;  // what the file says the weights are ("bfloat16"), informational

  MoeConfig moe;

  int64_t q_size() const { return num_attention_heads * head_dim; }
  bool is_moe_layer(int64_t layer) const;
  // Where a MoE layer's router and experts sit ("block_sparse_moe." for Mixtral, "mlp." for
  // Qwen2-MoE) and its experts' three projections' names (gate, up, down).
  std::string moe_prefix() const;
  std::vector<std::string> expert_projections() const;
  int64_t kv_size() const { return num_key_value_heads * head_dim; }
  const char* family_name() const;
};

// Reads `path` (a config.json); `json` is the same from text already read (origin names it).
LlamaConfig read_llama_config(const std::string& path);
LlamaConfig parse_llama_config(const nlohmann::json& json, const std::string& origin);
// The config as transformers would write it for this model, with `torch_dtype` set: the input's
// fields as they were (order kept), torch_dtype replaced.
nlohmann::ordered_json export_llama_config(const nlohmann::ordered_json& input, const std::string& torch_dtype);

// The tensors a checkpoint of this config holds, by Hugging Face name, with their shapes, in
// transformers' order: the embedding, each layer's, the final norm, lm_head (absent when tied).
struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  int layer = -1;  // its decoder layer, or -1 (embedding, final norm, lm_head)
};
std::vector<HfTensor> llama_tensors(const LlamaConfig& config);

// The Hugging Face name of a parameter as the engine names it: each decoder layer is a
// zero::Unit holding the layer as "block", so "model.layers.3.block.mlp.up_proj.weight" is
// transformers' "model.layers.3.mlp.up_proj.weight".
std::string hf_name(const std::string& engine_name);

// The files an export copies from the model directory it started from, beside the weights and
// config.json: the generation config and the tokenizer's files.
const std::vector<std::string>& hf_side_files();

// Parameters of the model (the count transformers' num_parameters() gives: tied weights once).
int64_t llama_parameter_count(const LlamaConfig& config);

}  // namespace zero::llama
