// DeepSpeed features zerocpp does not have, and the keys that change nothing: which are refused
// by name, which accepted with a warning (docs/config.md, "Features zerocpp does not implement").
#include "config/config_sections.h"

namespace zero::config_detail {

namespace {

// True when the block holds "enabled": true anywhere inside (compression_training's techniques
// each carry their own switch).
bool enabled_anywhere(const nlohmann::json& v) {
  if (!v.is_object() && !v.is_array()) return false;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (v.is_object() && it.key() == "enabled" && *it == true) return true;
    if (enabled_anywhere(*it)) return true;
  }
  return false;
}

}  // namespace

void read_unsupported_features(ObjectReader& root, Diagnostics& diag) {
  // DeepSpeed features that change training and that zerocpp does not have: refused when
  // switched on (or, where DeepSpeed itself fails without "enabled", when that is missing),
  // accepted with a warning when switched off.
  struct Feature {
    const char* key;
    const char* name;
    bool needs_enabled;  // DeepSpeed raises KeyError('enabled') without it
  };
  static const Feature kSwitched[] = {{"curriculum_learning", "curriculum learning", true},
                                      {"progressive_layer_drop", "progressive layer drop", true},
                                      {"data_efficiency", "data efficiency (curriculum data sampling, random-LTD)", false},
                                      {"elasticity", "elastic training", false},
                                      {"amp", "apex AMP (use fp16 or bf16)", true},
                                      {"hybrid_engine", "the hybrid (RLHF generation) engine", false},
                                      {"nebula", "the Azure Nebula checkpoint service", false},
                                      {"quantize_training", "MoQ (quantization-aware training)", false},
                                      {"eigenvalue", "eigenvalue computation (MoQ's schedule)", false}};
  for (const Feature& f : kSwitched) {
    const nlohmann::json* v = root.raw(f.key);
    if (!v) continue;
    if (!v->is_object()) {
      diag.problem(f.key, "expected an object, got " + v->dump());
    } else if (v->contains("enabled") && (*v)["enabled"] == true) {
      diag.problem(f.key, std::string(f.name) + " is not supported by zerocpp");
    } else if (f.needs_enabled && !v->contains("enabled")) {
      diag.problem(std::string(f.key) + ".enabled", "missing (DeepSpeed fails without it)");
    } else {
      diag.warnings.push_back(std::string(f.key) + ": switched off; zerocpp does not have " + f.name);
    }
  }

  if (const nlohmann::json* v = root.raw("compression_training")) {
    if (enabled_anywhere(*v)) {
      diag.problem("compression_training", "compression (quantization, pruning, distillation) is not supported by zerocpp");
    } else {
      diag.warnings.push_back("compression_training: every technique switched off; zerocpp does not have compression");
    }
  }
  // Read by model code (DeepSpeed's SparseSelfAttention): a model built from it is not dense.
  if (root.raw("sparse_attention")) {
    diag.problem("sparse_attention", "sparse attention is not supported by zerocpp (its models attend densely)");
  }
  // DeepSpeed 0.15's device mesh: sequence parallelism over more than one rank changes training.
  if (root.get_int("sequence_parallel_size", 1, 1) > 1) {
    diag.problem("sequence_parallel_size", "sequence parallelism is not supported by zerocpp");
  }
  root.get_int("data_parallel_size", 0, 0);  // with sequence_parallel_size 1: the world size
  // Weight quantization (pydantic in DeepSpeed): on when enabled or when either of its parts is given.
  ObjectReader wq = root.child("weight_quantization");
  if (wq.get_bool("enabled", false)) {
    diag.problem(wq.path_of("enabled"), "weight quantization is not supported by zerocpp");
  }
  wq.get_int("num_bits", 8, 1);
  wq.get_string("q_type", "symmetric");
  wq.get_int("q_groups", 1, 1);
  for (const char* part : {"quantized_initialization", "post_init_quant"}) {
    const nlohmann::json* p = wq.raw(part);
    if (p && !p->is_null() && !(p->is_object() && p->empty())) {
      diag.problem(wq.path_of(part), "weight quantization is not supported by zerocpp");
    }
  }
  wq.finish();

  // Acted on by DeepSpeed's launcher or by nothing that changes the numbers.
  if (const nlohmann::json* v = root.raw("autotuning"); v && enabled_anywhere(*v)) {
    diag.warnings.push_back("autotuning: acted on only by DeepSpeed's launcher with --autotuning; ignored");
  }
  if (root.raw("compile")) {
    diag.warnings.push_back("compile: LibTorch has no torch.compile (and DeepSpeed 0.14.4+ ignores the key); ignored");
  }
  if (root.get_bool("sparse_gradients", false)) {
    diag.warnings.push_back("sparse_gradients: no effect; zerocpp's embeddings produce dense gradients (same sums)");
  }
}

}  // namespace zero::config_detail
