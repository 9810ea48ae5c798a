#include "models/llama/llama_config.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "checkpoint/files.h"
#include "util/json_from_file.h"
#include "zero/error.h"

namespace zero::llama {
namespace {

using json = nlohmann::json;

// Fields that change nothing the trainer computes: token ids, generation defaults, and
// PretrainedConfig's bookkeeping (full dumps of older transformers versions write them all).
const std::set<std::string>& inert_fields() {
  static const std::set<std::string> fields = {"_name_or_path",
                                               "transformers_version",
                                               "torch_dtype",
                                               "dtype",
                                               "use_cache",
                                               "initializer_range",
                                               "bos_token_id",
                                               "eos_token_id",
                                               "sep_token_id",
                                               "decoder_start_token_id",
                                               "_attn_implementation",
                                               "_attn_implementation_autoset",
                                               "attn_implementation",
                                               "return_dict",
                                               "output_attentions",
                                               "output_hidden_states",
                                               "output_scores",
                                               "return_dict_in_generate",
                                               "torchscript",
                                               "use_bfloat16",
                                               "tf_legacy_loss",
                                               "pruned_heads",
                                               "chunk_size_feed_forward",
                                               "is_encoder_decoder",
                                               "is_decoder",
                                               "add_cross_attention",
                                               "cross_attention_hidden_size",
                                               "tie_encoder_decoder",
                                               "finetuning_task",
                                               "id2label",
                                               "label2id",
                                               "problem_type",
                                               "tokenizer_class",
                                               "prefix",
                                               "task_specific_params",
                                               "max_length",
                                               "min_length",
                                               "do_sample",
                                               "early_stopping",
                                               "num_beams",
                                               "num_beam_groups",
                                               "diversity_penalty",
                                               "temperature",
                                               "top_k",
                                               "top_p",
                                               "typical_p",
                                               "repetition_penalty",
                                               "length_penalty",
                                               "no_repeat_ngram_size",
                                               "encoder_no_repeat_ngram_size",
                                               "bad_words_ids",
                                               "num_return_sequences",
                                               "forced_bos_token_id",
                                               "forced_eos_token_id",
                                               "remove_invalid_values",
                                               "exponential_decay_length_penalty",
                                               "suppress_tokens",
                                               "begin_suppress_tokens",
                                               "architectures",
                                               "model_type",
                                               "auto_map",
                                               "custom_pipelines",
                                               "keys_to_ignore_at_inference",
                                               "max_window_layers",
                                               "unsloth_version",
                                               "unsloth_fixed",
                                               "_from_model_config",
                                               "is_llama_config"};
  return fields;
}

[[noreturn]] void refuse(const std::string& origin, const std::string& field, const std::string& why) {
  throw Error(origin + ": " + field + ": " + why, field);
}

class Fields {
 public:
  Fields(const json& j, std::string origin) : j_(j), origin_(std::move(origin)) {}
  template <class T>
  T get(const std::string& key, T fallback) {
    read_.insert(key);
    return json_field(j_, key, fallback, origin_ + ": ");
  }
  // Asking counts as reading: a field set to null is then accepted as absent.
  bool has(const std::string& key) {
    read_.insert(key);
    return j_.contains(key) && !j_[key].is_null();
  }
  const json& at(const std::string& key) {
    read_.insert(key);
    return j_.at(key);
  }
  void check_all_read() const {
    for (const auto& [key, value] : j_.items()) {
      if (read_.contains(key) || inert_fields().contains(key)) continue;
      refuse(origin_, key, "a config.json field zerocpp does not know: it may change the model, so it is refused");
    }
  }
  const std::string& origin() const { return origin_; }

 private:
  const json& j_;
  std::string origin_;
  std::set<std::string> read_;
};

struct Defaults {
  int64_t vocab, hidden, intermediate, layers, heads, max_positions;
  std::optional<int64_t> kv_heads;  // none: num_attention_heads
  int64_t sliding_window;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0;
};

// The experts of Mixtral (num_local_experts, always renormalised) and Qwen2-MoE (num_experts,
// moe_intermediate_size, the shared expert, norm_topk_prob, which layers).
MoeConfig read_moe(Fields& f, const json& j, Family family, int64_t intermediate_size, int64_t layers) {
  const std::string& origin = f.origin();
  MoeConfig m;
  if (family == Family::kMixtral) {
    m.num_experts = f.get<int64_t>(j.contains("num_experts") ? "num_experts" : "num_local_experts", 8);
    m.experts_per_token = f.get<int64_t>("num_experts_per_tok", 2);
    m.expert_intermediate_size = intermediate_size;
    m.normalize_top_k = true;
    if (f.get<double>("router_jitter_noise", 0.0) != 0.0)
      refuse(origin, "router_jitter_noise", "must be 0: zerocpp trains without the router's random jitter");
  } else {
    m.num_experts = f.get<int64_t>("num_experts", 60);
    m.experts_per_token = f.get<int64_t>("num_experts_per_tok", 4);
    m.expert_intermediate_size = f.get<int64_t>("moe_intermediate_size", 1408);
    m.shared_expert_intermediate_size = f.get<int64_t>("shared_expert_intermediate_size", 5632);
    m.normalize_top_k = f.get<bool>("norm_topk_prob", false);
    m.decoder_sparse_step = f.get<int64_t>("decoder_sparse_step", 1);
    m.mlp_only_layers = f.get<std::vector<int64_t>>("mlp_only_layers", {});
    if (m.decoder_sparse_step < 1) refuse(origin, "decoder_sparse_step", "must be at least 1");
    for (int64_t l : m.mlp_only_layers)
      if (l < 0 || l >= layers) refuse(origin, "mlp_only_layers", std::to_string(l) + " is not a layer");
    if (m.shared_expert_intermediate_size < 1 || m.shared_expert_intermediate_size > (int64_t{1} << 22))
      refuse(origin, "shared_expert_intermediate_size", "out of range (1 to 4194304)");
  }
  m.output_router_logits = f.get<bool>("output_router_logits", false);
  m.router_aux_loss_coef = f.get<double>("router_aux_loss_coef", 0.001);
  const char* experts_key = family == Family::kMixtral && !j.contains("num_experts") ? "num_local_experts" : "num_experts";
  if (m.num_experts < 1 || m.num_experts > (int64_t{1} << 12))
    refuse(origin, experts_key, std::to_string(m.num_experts) + " is not between 1 and 4096");
  if (m.experts_per_token < 1 || m.experts_per_token > m.num_experts)
    refuse(origin, "num_experts_per_tok",
           std::to_string(m.experts_per_token) + " is not between 1 and the " + std::to_string(m.num_experts) + " experts");
  if (m.expert_intermediate_size < 1 || m.expert_intermediate_size > (int64_t{1} << 22))
    refuse(origin, family == Family::kMixtral ? "intermediate_size" : "moe_intermediate_size", "out of range");
  // The tensor table holds 3 per expert per layer: far above any real model (DeepSeek-V3: 61 x 256),
  // far below what would make the table itself take gigabytes before a shard is read.
  if (layers * m.num_experts > (int64_t{1} << 16)) {
    refuse(origin, experts_key,
           std::to_string(m.num_experts) + " experts in each of " + std::to_string(layers) +
               " layers is more than 65536 experts in all");
  }
  return m;
}

RopeScaling read_rope_scaling(const json& r, const std::string& origin, const std::string& key) {
  RopeScaling s;
  if (!r.is_object()) refuse(origin, key, "must be an object or null");
  const std::string type = r.contains("rope_type")
                               ? json_field<std::string>(r, "rope_type", "default", origin + ": " + key)
                               : json_field<std::string>(r, "type", "default", origin + ": " + key);
  for (const auto& [field, value] : r.items()) {
    static const std::set<std::string> known = {
        "rope_type", "type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
        "rope_theta"};
    if (!known.contains(field)) refuse(origin, key + "." + field, "not a field of the linear or llama3 scaling");
  }
  if (type == "default") return s;
  if (type == "linear") {
    s.type = RopeScaling::Type::kLinear;
  } else if (type == "llama3") {
    s.type = RopeScaling::Type::kLlama3;
    s.low_freq_factor = json_field(r, "low_freq_factor", 1.0, origin + ": " + key);
    s.high_freq_factor = json_field(r, "high_freq_factor", 4.0, origin + ": " + key);
    s.original_max_position_embeddings =
        json_field(r, "original_max_position_embeddings", int64_t{8192}, origin + ": " + key);
    if (s.high_freq_factor <= s.low_freq_factor)
      refuse(origin, key + ".high_freq_factor", "must exceed low_freq_factor");
  } else {
    refuse(origin, key + ".rope_type",
           "\"" + type +
               "\" is not computed by zerocpp (llama3, linear and default are; dynamic, yarn, longrope, "
               "su and others are refused)");
  }
  if (!r.contains("factor")) refuse(origin, key + ".factor", "is required for " + type + " scaling");
  s.factor = json_field(r, "factor", 0.0, origin + ": " + key);
  if (s.factor <= 0) refuse(origin, key + ".factor", "must be positive");
  return s;
}

}  // namespace

const char* LlamaConfig::family_name() const {
  switch (family) {
    case Family::kLlama:
      return "Llama";
    case Family::kMistral:
      return "Mistral";
    case Family::kQwen2:
      return "Qwen2";
    case Family::kMixtral:
      return "Mixtral";
    case Family::kQwen2Moe:
      return "Qwen2-MoE";
  }
  return "?";
}

bool LlamaConfig::is_moe_layer(int64_t layer) const {
  if (moe.num_experts == 0) return false;
  if (std::find(moe.mlp_only_layers.begin(), moe.mlp_only_layers.end(), layer) != moe.mlp_only_layers.end()) return false;
  return (layer + 1) % moe.decoder_sparse_step == 0;
}

std::string LlamaConfig::moe_prefix() const { return family == Family::kMixtral ? "block_sparse_moe." : "mlp."; }

std::vector<std::string> LlamaConfig::expert_projections() const {
  if (family == Family::kMixtral) return {"w1", "w3", "w2"};
  return {"gate_proj", "up_proj", "down_proj"};
}

LlamaConfig parse_llama_config(const json& j, const std::string& origin) {
  if (!j.is_object()) throw Error(origin + ": not a JSON object", origin);
  Fields f(j, origin);
  LlamaConfig c;
  c.model_type = f.get<std::string>("model_type", "");
  const auto architectures = f.get<std::vector<std::string>>("architectures", {});
  const std::map<std::string, std::pair<std::string, Family>> families = {
      {"llama", {"LlamaForCausalLM", Family::kLlama}},
      {"mistral", {"MistralForCausalLM", Family::kMistral}},
      {"qwen2", {"Qwen2ForCausalLM", Family::kQwen2}},
      {"mixtral", {"MixtralForCausalLM", Family::kMixtral}},
      {"qwen2_moe", {"Qwen2MoeForCausalLM", Family::kQwen2Moe}}};
  const auto family = families.find(c.model_type);
  if (family == families.end()) {
    refuse(origin, "model_type",
           "\"" + c.model_type + "\" is not a model zerocpp trains (llama, mistral, qwen2, mixtral and qwen2_moe are)");
  }
  c.family = family->second.second;
  c.architecture = family->second.first;
  for (const auto& a : architectures) {
    if (a != c.architecture) {
      refuse(origin, "architectures",
             "\"" + a + "\" is not " + c.architecture + " (the only head zerocpp builds for " + c.model_type + ")");
    }
  }
  const Defaults d = c.family == Family::kLlama     ? Defaults{32000, 4096, 11008, 32, 32, 2048, std::nullopt, 0}
                     : c.family == Family::kMistral ? Defaults{32000, 4096, 14336, 32, 32, 131072, 8, 4096}
                     : c.family == Family::kQwen2   ? Defaults{151936, 4096, 22016, 32, 32, 32768, 32, 0}
                     : c.family == Family::kMixtral ? Defaults{32000, 4096, 14336, 32, 32, 131072, 8, 0, 1e-5, 1e6}
                                                    : Defaults{151936, 2048, 5632, 24, 16, 32768, 16, 0};
  c.vocab_size = f.get<int64_t>("vocab_size", d.vocab);
  c.hidden_size = f.get<int64_t>("hidden_size", d.hidden);
  c.intermediate_size = f.get<int64_t>("intermediate_size", d.intermediate);
  c.num_hidden_layers = f.get<int64_t>("num_hidden_layers", d.layers);
  c.num_attention_heads = f.get<int64_t>("num_attention_heads", d.heads);
  // Absent: the family's default; null: as many as the attention heads (transformers' rule).
  c.num_key_value_heads = j.contains("num_key_value_heads")
                              ? f.get<int64_t>("num_key_value_heads", c.num_attention_heads)
                              : d.kv_heads.value_or(c.num_attention_heads);
  c.pad_token_id = f.get<int64_t>("pad_token_id", -1);
  if (c.pad_token_id >= c.vocab_size) refuse(origin, "pad_token_id", "is not below vocab_size");
  c.max_position_embeddings = f.get<int64_t>("max_position_embeddings", d.max_positions);
  c.rms_norm_eps = f.get<double>("rms_norm_eps", d.rms_norm_eps);
  c.tie_word_embeddings = f.get<bool>("tie_word_embeddings", false);
  c.torch_dtype = f.has("torch_dtype") ? f.get<std::string>("torch_dtype", "") : f.get<std::string>("dtype", "");
  for (const auto* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "max_position_embeddings"}) {
    if (j.contains(key) && j[key].is_number() && j[key].get<double>() < 1) refuse(origin, key, "must be positive");
  }
  // Far above any real model, far below what would make a table of layers or tensors take
  // gigabytes before the shards are read (num_hidden_layers: 1e8 did).
  for (const auto& [key, value, most] :
       {std::tuple<const char*, int64_t, int64_t>{"vocab_size", c.vocab_size, int64_t{1} << 24},
        {"hidden_size", c.hidden_size, int64_t{1} << 20},
        {"intermediate_size", c.intermediate_size, int64_t{1} << 22},
        {"num_hidden_layers", c.num_hidden_layers, int64_t{1} << 12},
        {"num_attention_heads", c.num_attention_heads, int64_t{1} << 12},
        {"num_key_value_heads", c.num_key_value_heads, int64_t{1} << 12},
        {"max_position_embeddings", c.max_position_embeddings, int64_t{1} << 24}}) {
    if (value > most) refuse(origin, key, std::to_string(value) + " is more than " + std::to_string(most));
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    refuse(origin, "num_key_value_heads",
           std::to_string(c.num_key_value_heads) + " does not divide num_attention_heads " +
               std::to_string(c.num_attention_heads));
  }
  c.head_dim = f.get<int64_t>("head_dim", 0);
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_attention_heads != 0)
      refuse(origin, "head_dim", "absent, and hidden_size is not a multiple of num_attention_heads");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) refuse(origin, "head_dim", "must be even (rotary embeddings rotate pairs)");

  // Rotary embeddings: rope_theta and rope_scaling, or transformers 5's rope_parameters.
  c.rope_theta = f.get<double>("rope_theta", d.rope_theta);
  if (f.has("rope_scaling")) c.rope_scaling = read_rope_scaling(f.at("rope_scaling"), origin, "rope_scaling");
  if (f.has("rope_parameters")) {
    const json& p = f.at("rope_parameters");
    c.rope_scaling = read_rope_scaling(p, origin, "rope_parameters");
    c.rope_theta = json_field(p, "rope_theta", c.rope_theta, origin + ": rope_parameters");
  }

  const std::string act = f.get<std::string>("hidden_act", "silu");
  if (act != "silu" && act != "swish")
    refuse(origin, "hidden_act", "\"" + act + "\": the family's MLP is SwiGLU (silu)");
  if (f.get<double>("attention_dropout", 0.0) != 0.0)
    refuse(origin, "attention_dropout", "must be 0: zerocpp trains these models without dropout");
  if (f.get<int64_t>("pretraining_tp", 1) != 1)
    refuse(origin, "pretraining_tp", "must be 1 (tensor-parallel slicing of the linear layers is not computed)");
  if (f.get<bool>("rope_interleaved", false))
    refuse(origin, "rope_interleaved",
           "Meta's interleaved rotary layout is not computed (transformers' rotate-half is)");
  if (f.has("quantization_config")) refuse(origin, "quantization_config", "quantized weights are not trained");

  if (c.family == Family::kLlama) {
    c.qkv_bias = c.o_bias = f.get<bool>("attention_bias", false);
    c.mlp_bias = f.get<bool>("mlp_bias", false);
  } else if (c.family == Family::kMistral || c.family == Family::kMixtral) {
    c.sliding_window = f.get<int64_t>("sliding_window", d.sliding_window);
    if (j.contains("sliding_window") && j["sliding_window"].is_null()) c.sliding_window = 0;
  } else {
    c.qkv_bias = c.family == Family::kQwen2 || f.get<bool>("qkv_bias", true);
    if (f.get<bool>("use_sliding_window", false))
      refuse(origin, "use_sliding_window", "Qwen2's per-layer sliding window is not computed by zerocpp");
    f.get<int64_t>("sliding_window", 0);  // only read when use_sliding_window is true
    if (f.get<bool>("use_mrope", false))
      refuse(origin, "use_mrope", "multimodal rotary embeddings (Qwen2-VL) are not computed");
    if (f.has("layer_types")) {
      if (!f.at("layer_types").is_array()) refuse(origin, "layer_types", "must be a list");
      for (const auto& t : f.at("layer_types"))
        if (t != "full_attention") refuse(origin, "layer_types", "only full_attention layers are computed");
    }
  }
  if (c.sliding_window < 0) refuse(origin, "sliding_window", "must be positive or null");
  if (c.family == Family::kMixtral || c.family == Family::kQwen2Moe)
    c.moe = read_moe(f, j, c.family, c.intermediate_size, c.num_hidden_layers);
  f.check_all_read();
  return c;
}

LlamaConfig read_llama_config(const std::string& path) {
  const std::string text = checkpoint::read_text_file(path);  // a regular file, of bounded size
  json j;
  try {
    j = parse_json_from(text, path);
  } catch (const json::exception& e) {
    throw Error(path + ": not JSON (" + e.what() + ")", path);
  }
  try {
    return parse_llama_config(j, path);
  } catch (const json::exception& e) {  // a type every field's reader should have checked
    throw Error(path + ": " + e.what(), path);
  }
}

nlohmann::ordered_json export_llama_config(const nlohmann::ordered_json& input, const std::string& torch_dtype) {
  nlohmann::ordered_json out = input;
  out["torch_dtype"] = torch_dtype;
  return out;
}

std::vector<HfTensor> llama_tensors(const LlamaConfig& c) {
  std::vector<HfTensor> t;
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  t.push_back({"model.embed_tokens.weight", {c.vocab_size, H}, -1});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto add = [&](const std::string& name, std::vector<int64_t> shape) {
      t.push_back({p + name, std::move(shape), l});
    };
    add("input_layernorm.weight", {H});
    add("self_attn.q_proj.weight", {c.q_size(), H});
    if (c.qkv_bias) add("self_attn.q_proj.bias", {c.q_size()});
    add("self_attn.k_proj.weight", {c.kv_size(), H});
    if (c.qkv_bias) add("self_attn.k_proj.bias", {c.kv_size()});
    add("self_attn.v_proj.weight", {c.kv_size(), H});
    if (c.qkv_bias) add("self_attn.v_proj.bias", {c.kv_size()});
    add("self_attn.o_proj.weight", {H, c.q_size()});
    if (c.o_bias) add("self_attn.o_proj.bias", {H});
    add("post_attention_layernorm.weight", {H});
    if (c.is_moe_layer(l)) {
      const std::string m = c.moe_prefix();
      const std::vector<std::string> proj = c.expert_projections();
      const int64_t E = c.moe.expert_intermediate_size, S = c.moe.shared_expert_intermediate_size;
      add(m + "gate.weight", {c.moe.num_experts, H});
      for (int64_t e = 0; e < c.moe.num_experts; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        add(x + proj[0] + ".weight", {E, H});
        add(x + proj[1] + ".weight", {E, H});
        add(x + proj[2] + ".weight", {H, E});
      }
      if (S > 0) {
        add(m + "shared_expert.gate_proj.weight", {S, H});
        add(m + "shared_expert.up_proj.weight", {S, H});
        add(m + "shared_expert.down_proj.weight", {H, S});
        add(m + "shared_expert_gate.weight", {1, H});
      }
      continue;
    }
    add("mlp.gate_proj.weight", {I, H});
    if (c.mlp_bias) add("mlp.gate_proj.bias", {I});
    add("mlp.up_proj.weight", {I, H});
    if (c.mlp_bias) add("mlp.up_proj.bias", {I});
    add("mlp.down_proj.weight", {H, I});
    if (c.mlp_bias) add("mlp.down_proj.bias", {H});
  }
  t.push_back({"model.norm.weight", {H}, -1});
  if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", {c.vocab_size, H}, -1});
  return t;
}

std::string hf_name(const std::string& engine_name) {
  const std::string unit = ".block.";
  const auto at = engine_name.find(unit);
  if (at == std::string::npos || !engine_name.starts_with("model.layers.")) return engine_name;
  return engine_name.substr(0, at) + "." + engine_name.substr(at + unit.size());
}

const std::vector<std::string>& hf_side_files() {
  static const std::vector<std::string> files = {"generation_config.json",
                                                 "tokenizer.json",
                                                 "tokenizer_config.json",
                                                 "special_tokens_map.json",
                                                 "tokenizer.model",
                                                 "vocab.json",
                                                 "merges.txt",
                                                 "added_tokens.json",
                                                 "chat_template.jinja"};
  return files;
}

int64_t llama_parameter_count(const LlamaConfig& c) {
  int64_t n = 0;
  for (const auto& t : llama_tensors(c)) {
    int64_t e = 1;
    for (int64_t d : t.shape) e *= d;
    n += e;
  }
  return n;
}

}  // namespace zero::llama
