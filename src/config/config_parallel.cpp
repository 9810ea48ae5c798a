// The parallel layouts beside ZeRO: DeepSpeed's AutoTP training block ("tensor_parallel").
#include <cctype>

#include "config/config_sections.h"

namespace zero::config_detail {

namespace {

// The tensor-parallel size, under whichever key the file gives it: AutoTP training's
// "autotp_size", the seed's "tp_size", or the inference block's nested "tp"/"tensor_parallel".
void read_size(ObjectReader& tp, TensorParallelConfig& out, Diagnostics& diag) {
  struct Given {
    std::string path;
    int64_t size;
  };
  std::vector<Given> given;
  if (tp.has("autotp_size")) given.push_back({tp.path_of("autotp_size"), tp.get_int("autotp_size", 0, 0, 1 << 20)});
  if (tp.has("tp_size")) given.push_back({tp.path_of("tp_size"), tp.get_int("tp_size", 1, 1, 1 << 20)});
  for (const char* sub : {"tp", "tensor_parallel"}) {
    ObjectReader inner = tp.child(sub, UnknownKeys::kIgnore);
    if (inner.has("tp_size")) given.push_back({inner.path_of("tp_size"), inner.get_int("tp_size", 1, 1, 1 << 20)});
    inner.accept({"enabled", "tp_grain_size", "mpu", "tp_group"});
    inner.finish();
  }
  for (const Given& g : given) {
    const int size = static_cast<int>(std::max<int64_t>(1, g.size));
    if (out.size > 1 && size > 1 && size != out.size) {
      diag.problem(g.path, std::to_string(size) + " differs from " + out.key + " = " + std::to_string(out.size));
    } else if (size > 1 && out.size == 1) {
      out.size = size;
      out.key = g.path;
    }
  }
}

void read_layer_specs(ObjectReader& partition, TensorParallelConfig& out, Diagnostics& diag) {
  const nlohmann::json* specs = partition.raw("layer_specs");
  if (!specs || specs->is_null()) return;
  const std::string path = partition.path_of("layer_specs");
  if (!specs->is_array()) {
    diag.problem(path, "expected a list of {\"patterns\": [...], \"partition_type\": \"row\" | \"column\"}");
    return;
  }
  for (size_t i = 0; i < specs->size(); ++i) {
    ObjectReader spec(&(*specs)[i], path + "[" + std::to_string(i) + "]", diag, UnknownKeys::kRefuse);
    TensorParallelLayerSpec s;
    s.patterns = spec.get_string_list("patterns");
    // (Compiled, and matched against the model's parameter names, where the model is built.)
    if (s.patterns.empty()) diag.problem(spec.path_of("patterns"), "expected at least one pattern");
    // DeepSpeed's names for the two halves of Megatron's pair.
    s.row = spec.get_choice("partition_type", 1, {"row", "column"}) == 0;
    spec.accept({"shape", "partition_dim"});
    spec.finish();
    out.layer_specs.push_back(std::move(s));
  }
}

}  // namespace

void read_tensor_parallel(ObjectReader& root, TensorParallelConfig& out, Diagnostics& diag) {
  ObjectReader tp = root.child("tensor_parallel", UnknownKeys::kIgnore);
  read_size(tp, out, diag);
  out.preset_model = tp.get_string("preset_model", "");
  if (!out.preset_model.empty() && out.preset_model != "llama" && out.preset_model != "mistral" &&
      out.preset_model != "qwen2") {
    diag.problem(tp.path_of("preset_model"), "\"" + out.preset_model +
                                                  "\": zerocpp's tensor parallelism knows llama, mistral and qwen2");
  }
  out.overlap_comm = tp.get_bool("tp_overlap_comm", false);
  ObjectReader partition = tp.child("partition_config", UnknownKeys::kRefuse);
  out.use_default_specs = partition.get_bool("use_default_specs", true);
  read_layer_specs(partition, out, diag);
  partition.finish();
  // Read by DeepSpeed's sharding code, not by the training step.
  tp.accept({"tp_grain_size", "keep_module_on_host", "dtype", "injection_policy_tuple"});
  tp.finish();
  if (out.sequence_parallel && out.size <= 1) {
    diag.problem("zerocpp.sequence_parallel",
                 "needs tensor parallelism (tensor_parallel.autotp_size > 1): it splits the sequence over that group");
  }
  if (!out.use_default_specs && out.layer_specs.empty() && out.size > 1) {
    diag.problem(partition.path_of("layer_specs"), "use_default_specs is false and no layer_specs are given");
  }
}

void read_pipeline(ObjectReader& root, PipelineConfig& out, Diagnostics& diag) {
  struct Given {
    std::string path;
    int size;
  };
  std::vector<Given> given;
  // The seed's (Megatron-style) key.
  ObjectReader pp = root.child("pipeline_parallel", UnknownKeys::kIgnore);
  if (pp.has("pp_size")) given.push_back({pp.path_of("pp_size"), static_cast<int>(pp.get_int("pp_size", 1, 1, 1 << 20))});
  pp.finish();
  // DeepSpeed's "pipeline" block: what PipelineModule and the pipeline engine read.
  // DeepSpeed merges the block into its defaults key by key (any key is taken).
  ObjectReader block = root.child("pipeline", UnknownKeys::kIgnore);
  if (const nlohmann::json* stages = block.raw("stages"); stages && !(stages->is_string() && *stages == "auto")) {
    given.push_back({block.path_of("stages"), static_cast<int>(block.get_int("stages", 1, 1, 1 << 20))});
  } else {
    block.accept({"stages"});
  }
  std::string method = block.has("partition_method") ? block.get_string("partition_method", "parameters")
                                                     : block.get_string("partition", "parameters");
  block.accept({"partition", "partition_method"});
  std::string lowered = method;
  for (char& ch : lowered) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lowered == "best") lowered = "parameters";  // DeepSpeed's config default, PipelineModule's "parameters"
  if (lowered != "parameters" && lowered != "uniform" && lowered.rfind("type:", 0) != 0) {
    diag.problem(block.path_of("partition"), "\"" + method + "\": zerocpp cuts stages by \"parameters\", \"uniform\" or \"type:REGEX\"");
  }
  out.partition_method = lowered.rfind("type:", 0) == 0 ? "type:" + method.substr(5) : lowered;
  out.activation_checkpoint_interval = block.get_int("activation_checkpoint_interval", 0, 0);
  out.pipe_partitioned = block.get_bool("pipe_partitioned", true);
  out.grad_partitioned = block.get_bool("grad_partitioned", true);
  block.accept({"seed_layers", "use_reentrant"});  // the layers' seeds (zerocpp's are the model's), checkpointing's flavour
  block.finish();
  for (const Given& g : given) {
    if (out.stages > 1 && g.size > 1 && g.size != out.stages) {
      diag.problem(g.path, std::to_string(g.size) + " differs from " + out.key + " = " + std::to_string(out.stages));
    } else if (g.size > 1 && out.stages == 1) {
      out.stages = g.size;
      out.key = g.path;
    }
  }
}

void read_expert_parallel(ObjectReader& root, ExpertParallelConfig& out, Diagnostics& diag) {
  // DeepSpeed's AutoEP block (deepspeed/module_inject/auto_ep_config.py), for the Hugging Face MoE
  // models zerocpp builds: their routers are softmax over the experts, named "gate", and their
  // experts "experts".
  ObjectReader ep = root.child("expert_parallel", UnknownKeys::kIgnore);
  out.enabled = ep.get_bool("enabled", false);
  out.size = static_cast<int>(ep.get_int("autoep_size", 1, 1, 1 << 20));
  if (ep.get_int("expert_tensor_parallel_size", 1, 1, 1 << 20) != 1)
    diag.problem(ep.path_of("expert_tensor_parallel_size"), "must be 1 (DeepSpeed's AutoEP refuses any other)");
  if (const nlohmann::json* preset = ep.raw("preset_model"); preset && !preset->is_null()) {
    out.preset_model = ep.get_string("preset_model", "");
    if (out.preset_model != "mixtral" && out.preset_model != "qwen2_moe" && out.preset_model != "qwen3_moe") {
      diag.problem(ep.path_of("preset_model"),
                   "\"" + out.preset_model + "\": zerocpp's mixtures of experts are mixtral and qwen2_moe (DeepSpeed's "
                                              "qwen3_moe preset covers qwen2_moe)");
    }
  }
  const std::string score = ep.get_string("score_func", "auto");
  if (score != "auto" && score != "softmax")
    diag.problem(ep.path_of("score_func"), "\"" + score + "\": Mixtral's and Qwen2-MoE's routers are softmax");
  for (const auto& [key, name] : {std::pair<const char*, const char*>{"router_pattern", "gate"}, {"expert_pattern", "experts"}}) {
    const nlohmann::json* given = ep.raw(key);
    if (!given || given->is_null()) continue;
    const std::string value = ep.get_string(key, name);
    if (value != name) diag.problem(ep.path_of(key), "\"" + value + "\": the MoE layers' " + key + " is \"" + name + "\"");
  }
  if (const nlohmann::json* pattern = ep.raw("moe_layer_pattern"); pattern && !pattern->is_null()) {
    ep.get_string("moe_layer_pattern", "");  // the layers with experts are the model's (config.json's), whatever it says
  }
  if (const nlohmann::json* coeff = ep.raw("load_balance_coeff"); coeff && !coeff->is_null())
    diag.problem(ep.path_of("load_balance_coeff"), "must be null (DeepSpeed's AutoEP refuses it too)");
  // Routing that would change the numbers from the model's own: only DeepSpeed's defaults (the
  // model's config.json decides top-k, renormalisation and scale).
  ep.require_default("route_norm", nullptr);
  ep.require_default("route_scale", 1.0);
  ep.require_default("top_k", "auto");
  ep.require_default("routed_scaling_factor", "auto");
  ep.require_default("num_expert_groups", nullptr);
  ep.require_default("num_limited_groups", nullptr);
  // How DeepSpeed's kernels compute the same sums, and the preset's names for what zerocpp knows
  // from the model.
  ep.accept({"validate_folding_routing", "use_grouped_mm", "disable_triton_grouped_mm", "combine_impl", "score_apply",
             "expert_w1", "expert_w2", "expert_w3", "num_experts_attr", "top_k_attr", "has_shared_experts",
             "shared_experts_pattern", "shared_experts_gate_pattern"});
  ep.finish();
}

}  // namespace zero::config_detail
