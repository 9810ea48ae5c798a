#include "config/config_sections.h"

namespace zero::config_detail {
namespace {

const std::vector<std::string> kDevices = {"none", "cpu", "nvme"};

OffloadDevice read_device(ObjectReader& block) {
  return static_cast<OffloadDevice>(block.get_choice("device", 0, kDevices));
}

void read_offload_optimizer(ObjectReader block, OffloadOptimizerConfig& o) {
  o.device = read_device(block);
  o.nvme_path = block.get_string("nvme_path", "");
  o.pin_memory = block.get_bool("pin_memory", false);
  o.buffer_count = block.get_int("buffer_count", 4, 0);
  o.pipeline_read = block.get_bool("pipeline_read", false);
  o.pipeline_write = block.get_bool("pipeline_write", false);
  o.fast_init = block.get_bool("fast_init", false);
  o.ratio = block.get_double("ratio", 1.0, 0.0, 1.0);
  block.accept({"pipeline"});  // DeepSpeed's derived flag (pipeline_read || pipeline_write)
  block.finish();
}

void read_offload_param(ObjectReader block, OffloadParamConfig& o) {
  o.device = read_device(block);
  o.nvme_path = block.get_string("nvme_path", "");
  o.pin_memory = block.get_bool("pin_memory", false);
  o.buffer_count = block.get_int("buffer_count", 5, 0);
  o.buffer_size = block.get_int("buffer_size", 100'000'000, 0);
  o.max_in_cpu = block.get_int("max_in_cpu", 1'000'000'000, 0);
  block.finish();
}

// Deprecated spelling `old_key` of `new_path`: warns; an error when both are given.
bool alias_used(ObjectReader& z, Diagnostics& diag, std::string_view old_key, const std::string& new_path,
                bool new_given) {
  if (!z.has(old_key)) return false;
  if (new_given) {
    diag.problem(z.path_of(old_key),
                 "deprecated alias of " + new_path + ", which is also given: keep only " + new_path);
    return false;
  }
  diag.warnings.push_back(z.path_of(old_key) + " is deprecated: use " + new_path);
  return true;
}

}  // namespace

void read_zero_optimization(ObjectReader& root, ZeroConfig& zc, Diagnostics& diag) {
  // The deprecated boolean form: true is stage 1 (with the top-level allgather_size as its
  // allgather bucket), false stage 0.
  const nlohmann::json* whole = root.raw("zero_optimization");
  if (whole && whole->is_boolean()) {
    zc.stage = whole->get<bool>() ? 1 : 0;
    diag.warnings.push_back("zero_optimization: the boolean form is deprecated: use {\"stage\": " +
                            std::to_string(zc.stage) + "}");
    diag.record("zero_optimization.stage", zc.stage, ValueSource::kAlias);
    zc.allgather_bucket_size = root.get_int("allgather_size", 500'000'000, 0);
    zc.overlap_comm = false;
    return;
  }
  root.accept({"allgather_size"});
  // A pydantic block in DeepSpeed: an unknown key is an error there too.
  ObjectReader z = root.child("zero_optimization");
  zc.stage = static_cast<int>(z.get_int("stage", 0, 0, 3));
  zc.contiguous_gradients = z.get_bool("contiguous_gradients", true);
  zc.reduce_scatter = z.get_bool("reduce_scatter", true);
  bool is_auto = false;
  // 0 is DeepSpeed's too: every parameter is its own bucket / sub-group; allgather: no limit.
  zc.reduce_bucket_size = z.get_int_or_auto("reduce_bucket_size", 500'000'000, 0, &is_auto);
  zc.allgather_partitions = z.get_bool("allgather_partitions", true);
  zc.allgather_bucket_size = z.get_int("allgather_bucket_size", 500'000'000, 0);
  const nlohmann::json* overlap = z.raw("overlap_comm");  // null, as absent: true at stage 3 only
  zc.overlap_comm = overlap && overlap->is_null() ? zc.stage == 3 : z.get_bool("overlap_comm", zc.stage == 3);
  zc.load_from_fp32_weights = z.get_bool("load_from_fp32_weights", true);
  zc.round_robin_gradients = z.get_bool("round_robin_gradients", false);
  read_offload_optimizer(z.child("offload_optimizer"), zc.offload_optimizer);
  read_offload_param(z.child("offload_param"), zc.offload_param);
  zc.sub_group_size = z.get_int("sub_group_size", 1'000'000'000, 0);
  // DeepSpeed accepts each stage-3 field by its name and by its stage3_ alias.
  auto name = [&](std::string_view field, std::string_view alias) { return z.spelling(field, alias); };
  zc.stage3_prefetch_bucket_size =
      z.get_int_or_auto(name("prefetch_bucket_size", "stage3_prefetch_bucket_size"), 50'000'000, 0, &is_auto);
  zc.stage3_param_persistence_threshold = z.get_int_or_auto(
      name("param_persistence_threshold", "stage3_param_persistence_threshold"), 100'000, 0, &is_auto);
  zc.stage3_model_persistence_threshold =
      z.get_int(name("model_persistence_threshold", "stage3_model_persistence_threshold"), INT64_MAX, 0);
  zc.stage3_max_live_parameters =
      z.get_int(name("max_live_parameters", "stage3_max_live_parameters"), 1'000'000'000, 0);
  zc.stage3_max_reuse_distance =
      z.get_int(name("max_reuse_distance", "stage3_max_reuse_distance"), 1'000'000'000, 0);
  std::string_view gather_key = name("gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save");
  bool gather_given = z.has(gather_key);
  zc.stage3_gather_16bit_weights_on_model_save = z.get_bool(gather_key, false);
  // An all-reduce instead of an all-gather to fetch stage-3 parameters: the same values.
  z.get_bool(name("use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params"), false);
  zc.elastic_checkpoint = z.get_bool("elastic_checkpoint", false);
  zc.ignore_unused_parameters = z.get_bool("ignore_unused_parameters", true);

  // Deprecated aliases.
  std::string gather_path = z.path_of(gather_key);
  if (alias_used(z, diag, "stage3_gather_fp16_weights_on_model_save", gather_path, gather_given)) {
    zc.stage3_gather_16bit_weights_on_model_save = z.get_bool("stage3_gather_fp16_weights_on_model_save", false);
    diag.record(gather_path, zc.stage3_gather_16bit_weights_on_model_save, ValueSource::kAlias);
  }
  std::string opt_path = z.path_of("offload_optimizer.device");
  if (alias_used(z, diag, "cpu_offload", opt_path, z.has("offload_optimizer")) && z.get_bool("cpu_offload", false)) {
    zc.offload_optimizer.device = OffloadDevice::kCpu;
    diag.record(opt_path, "cpu", ValueSource::kAlias);
  }
  std::string param_path = z.path_of("offload_param.device");
  if (alias_used(z, diag, "cpu_offload_param", param_path, z.has("offload_param")) &&
      z.get_bool("cpu_offload_param", false)) {
    zc.offload_param.device = OffloadDevice::kCpu;
    diag.record(param_path, "cpu", ValueSource::kAlias);
  }
  // DeepSpeed warns about this one and drops its value.
  if (z.has("cpu_offload_use_pin_memory")) {
    z.get_bool("cpu_offload_use_pin_memory", false);
    diag.warnings.push_back(z.path_of("cpu_offload_use_pin_memory") +
                            " is deprecated and ignored, as DeepSpeed does: use offload_*.pin_memory");
  }
  z.accept(
      {"cpu_offload", "cpu_offload_param", "cpu_offload_use_pin_memory", "stage3_gather_fp16_weights_on_model_save"});

  // ZeRO++ (docs/zeropp.md).
  zc.zero_quantized_weights = z.get_bool("zero_quantized_weights", false);
  zc.zero_hpz_partition_size = static_cast<int>(z.get_int("zero_hpz_partition_size", 1, 0));
  zc.zero_quantized_gradients = z.get_bool("zero_quantized_gradients", false);
  zc.zero_quantized_nontrainable_weights = z.get_bool("zero_quantized_nontrainable_weights", false);
  auto stage3_only = [&](const char* key, bool on) {
    if (on && zc.stage != 3) {
      diag.warnings.push_back(z.path_of(key) + " has no effect at stage " + std::to_string(zc.stage) +
                              " (only stage 3 gathers parameters)");
    }
  };
  stage3_only("zero_quantized_weights", zc.zero_quantized_weights);
  stage3_only("zero_quantized_nontrainable_weights", zc.zero_quantized_nontrainable_weights);
  stage3_only("zero_hpz_partition_size", zc.zero_hpz_partition_size > 1);
  if (zc.zero_quantized_gradients && (zc.stage == 0 || !zc.reduce_scatter)) {
    diag.warnings.push_back(z.path_of("zero_quantized_gradients") +
                            " has no effect without a reduce-scatter (stage 0, or reduce_scatter false: all-reduce)");
  }
  if (z.get_int("mics_shard_size", -1) > 0) {
    diag.problem(z.path_of("mics_shard_size"), "MiCS is not supported by zerocpp (-1 or 0: off)");
  }
  z.get_bool("mics_hierarchical_params_gather", false);
  if (z.get_bool("legacy_stage1", false)) {
    diag.problem(z.path_of("legacy_stage1"), "the pre-0.5.9 stage 1 is gone from DeepSpeed too: remove the key");
  }
  // Accepted with no effect on the numbers: how DeepSpeed groups modules for stage-3 fetches
  // (0.16.0), LoCo's settings for quantized gradients (0.16.2, only used with those), and
  // switches whose behaviour zerocpp's design already has.
  z.get_int(name("module_granularity_threshold", "stage3_module_granularity_threshold"), 0);
  if (const nlohmann::json* loco = z.raw("zeropp_loco_param"); loco && !loco->is_object() && !loco->is_null()) {
    diag.problem(z.path_of("zeropp_loco_param"), "expected an object, got " + loco->dump());
  }
  z.get_bool("memory_efficient_linear", true);
  z.get_bool("override_module_apply", true);
  z.get_bool("use_multi_rank_bucket_allreduce", true);
  z.get_bool("log_trace_cache_warnings", false);
  z.get_bool("pipeline_loading_checkpoint", false);
  z.finish();
}

void read_aio(ObjectReader& root, AioConfig& aio) {
  ObjectReader a = root.child("aio", UnknownKeys::kIgnore);  // DeepSpeed reads aio key by key
  aio.block_size = a.get_int("block_size", 1'048'576, 1);
  aio.queue_depth = a.get_int("queue_depth", 8, 1);
  bool has_alias = a.has("thread_count");
  aio.intra_op_parallelism = a.get_int("intra_op_parallelism", 1, 1);
  if (has_alias) aio.intra_op_parallelism = a.get_int("thread_count", 1, 1);
  aio.single_submit = a.get_bool("single_submit", false);
  aio.overlap_events = a.get_bool("overlap_events", true);
  a.require_default("use_gds", false);
  a.finish();
}

}  // namespace zero::config_detail
