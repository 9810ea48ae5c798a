#include "config/config_sections.h"

namespace zero::config_detail {

void read_precision(ObjectReader& root, Config& config, Diagnostics& diag) {
  // DeepSpeed reads fp16 and bf16 key by key (files carry fp16.opt_level, loss-scale keys in bf16).
  ObjectReader fp16 = root.child("fp16", UnknownKeys::kIgnore);
  bool is_auto = false;
  Fp16Config& f = config.fp16;
  f.enabled = fp16.get_bool_or_auto("enabled", false, &is_auto);
  f.loss_scale = fp16.get_double("loss_scale", 0, 0);
  f.initial_scale_power = static_cast<int>(fp16.get_int("initial_scale_power", 16, 0, 127));
  f.loss_scale_window = fp16.get_int("loss_scale_window", 1000, 1);
  f.hysteresis = static_cast<int>(fp16.get_int("hysteresis", 2, 1, 1 << 30));
  f.consecutive_hysteresis = fp16.get_bool("consecutive_hysteresis", false);
  f.min_loss_scale = fp16.get_double("min_loss_scale", 1, 1e-30);
  f.auto_cast = fp16.get_bool("auto_cast", false);
  fp16.require_default("fp16_master_weights_and_grads", false);
  fp16.finish();

  // DeepSpeed reads the first of bf16 and bfloat16 that is present.
  bool alias = root.has("bfloat16");
  if (alias && root.has("bf16")) {
    diag.warnings.push_back("bfloat16: ignored, as DeepSpeed does, since bf16 is given");
  } else if (alias) {
    diag.warnings.push_back("bfloat16 is deprecated: use bf16");
  }
  ObjectReader bf16 = root.child(alias && !root.has("bf16") ? "bfloat16" : "bf16", UnknownKeys::kIgnore);
  config.bf16 = bf16.get_bool_or_auto("enabled", false, &is_auto);
  // When DeepSpeed's BF16_Optimizer (bf16 without ZeRO) folds gradients into fp32: zerocpp
  // accumulates in the dtype data_types.grad_accum_dtype names either way.
  bf16.get_bool("immediate_grad_update", false);
  bf16.finish();
  root.accept({"bfloat16"});
}

void read_monitoring(ObjectReader& root, Config& config, Diagnostics& diag) {
  auto read_monitor = [&](const char* key, MonitorConfig& m) {
    ObjectReader b = root.child(key);  // DeepSpeed's pydantic monitor blocks: unknown keys refused
    m.enabled = b.get_bool("enabled", false);
    m.output_path = b.get_string("output_path", "");
    m.job_name = b.get_string("job_name", "DeepSpeedJobName");
    b.finish();
  };
  read_monitor("tensorboard", config.tensorboard);
  read_monitor("csv_monitor", config.csv_monitor);

  // Services that need the network: accepted, switched off with a warning.
  auto read_service = [&](const char* key, std::initializer_list<std::string_view> other_keys) {
    ObjectReader b = root.child(key);
    if (b.get_bool("enabled", false)) {
      diag.warnings.push_back(std::string(key) +
                              ".enabled: not supported by zerocpp (it needs a network service); ignored");
    }
    b.accept(other_keys);
    b.finish();
  };
  read_service("wandb", {"group", "team", "project"});
  read_service("comet", {"samples_log_interval", "project", "workspace", "api_key", "experiment_name", "experiment_key",
                         "online", "mode"});

  ObjectReader prom = root.child("prometheus");  // zerocpp's own block: unknown keys refused
  PrometheusConfig& p = config.prometheus;
  p.enabled = prom.get_bool("enabled", false);
  p.host = prom.get_string("host", "127.0.0.1");
  p.port = static_cast<int>(prom.get_int("port", 9400, 0, 65535));  // 0: any free port
  p.job_name = prom.get_string("job_name", "zerocpp");
  prom.finish();

  ObjectReader cl = root.child("comms_logger");  // a pydantic block in DeepSpeed
  CommsLoggerConfig& c = config.comms_logger;
  c.enabled = cl.get_bool("enabled", false);
  c.verbose = cl.get_bool("verbose", false);
  c.prof_all = cl.get_bool("prof_all", true);
  c.prof_ops = cl.get_string_list("prof_ops");
  c.debug = cl.get_bool("debug", false);
  cl.finish();

  ObjectReader fp = root.child("flops_profiler", UnknownKeys::kIgnore);
  FlopsProfilerConfig& f = config.flops_profiler;
  f.enabled = fp.get_bool("enabled", false);
  f.profile_step = fp.get_int("profile_step", 1, -1);  // -1 (as real files write): never
  fp.get_double("recompute_fwd_factor", 0.0, 0.0);
  f.module_depth = fp.get_int("module_depth", -1, -1);
  f.top_modules = fp.get_int("top_modules", 1, 1);
  f.detailed = fp.get_bool("detailed", true);
  f.output_file = fp.get_string("output_file", "");
  f.peak_tflops = fp.get_double("peak_tflops", 0.0, 0.0);
  fp.finish();

  ObjectReader ac = root.child("activation_checkpointing", UnknownKeys::kIgnore);
  ActivationCheckpointingConfig& a = config.activation_checkpointing;
  a.partition_activations = ac.get_bool("partition_activations", false);
  a.cpu_checkpointing = ac.get_bool("cpu_checkpointing", false);
  a.contiguous_memory_optimization = ac.get_bool("contiguous_memory_optimization", false);
  const nlohmann::json* n = ac.raw("number_checkpoints");
  if (n && !n->is_null()) a.number_checkpoints = ac.get_int("number_checkpoints", 0, 1);
  a.synchronize_checkpoint_boundary = ac.get_bool("synchronize_checkpoint_boundary", false);
  a.profile = ac.get_bool("profile", false);
  ac.finish();

  ObjectReader ck = root.child("checkpoint", UnknownKeys::kIgnore);
  static const std::vector<std::string> kTagValidation = {"Ignore", "Warn", "Fail"};
  config.checkpoint.tag_validation = static_cast<TagValidation>(ck.get_choice("tag_validation", 1, kTagValidation));
  config.checkpoint.load_universal = ck.get_bool("load_universal", false);
  config.checkpoint.use_node_local_storage = ck.get_bool("use_node_local_storage", false);
  ObjectReader parallel_write = ck.child("parallel_write", UnknownKeys::kIgnore);
  parallel_write.get_bool("pipeline_stage", false);  // pipeline parallelism's checkpoint layout
  parallel_write.finish();
  ck.finish();

  // timers.throughput is a pydantic block in DeepSpeed; the rest of "timers" is read key by key.
  ObjectReader timers = root.child("timers", UnknownKeys::kIgnore);
  ObjectReader throughput = timers.child("throughput");
  throughput.get_bool("enabled", true);
  throughput.get_bool("synchronized", true);
  throughput.finish();
  timers.finish();
}

CommDType read_grad_accum_dtype(ObjectReader& data_types, Diagnostics& diag) {
  static const std::vector<std::string> kSpellings = {
      "fp32", "float32", "float", "torch.float32", "fp16", "float16", "half", "torch.float16", "bf16", "bfloat16",
      "bfloat", "torch.bfloat16"};
  const nlohmann::json* v = data_types.raw("grad_accum_dtype");
  if (v && *v == "int8") {
    diag.problem(data_types.path_of("grad_accum_dtype"), "int8 gradient accumulation is not supported by zerocpp");
    return CommDType::kFp32;
  }
  size_t i = data_types.get_choice("grad_accum_dtype", 0, kSpellings);
  return i < 4 ? CommDType::kFp32 : i < 8 ? CommDType::kFp16 : CommDType::kBf16;
}

void check_cross_key_rules(Config& c, Diagnostics& diag) {
  if (c.fp16.enabled && c.bf16) diag.problem("fp16.enabled", "fp16 and bf16 cannot both be enabled");
  ZeroConfig& z = c.zero;
  // DeepSpeed passes offload_param to stage 3 only and offload_optimizer to stages 1-3 only.
  if (z.offload_param.device != OffloadDevice::kNone && z.stage != 3) {
    diag.warnings.push_back("zero_optimization.offload_param: ignored at stage " + std::to_string(z.stage) +
                            " (parameters are offloaded at stage 3 only), as DeepSpeed does");
    z.offload_param.device = OffloadDevice::kNone;
    diag.record("zero_optimization.offload_param.device", "none", ValueSource::kDefault);
  }
  if (z.offload_optimizer.device != OffloadDevice::kNone && z.stage == 0) {
    diag.warnings.push_back("zero_optimization.offload_optimizer: ignored at stage 0, as DeepSpeed does");
    z.offload_optimizer.device = OffloadDevice::kNone;
    diag.record("zero_optimization.offload_optimizer.device", "none", ValueSource::kDefault);
  }
  if (c.activation_checkpointing.partition_activations && c.tensor_parallel.size <= 1) {
    // DeepSpeed takes it without model parallelism too, where it changes nothing.
    diag.warnings.push_back("activation_checkpointing.partition_activations: no effect without tensor parallelism: "
                            "it splits checkpointed activations over the tensor-parallel group "
                            "(with one model-parallel rank DeepSpeed changes nothing either)");
  } else if (c.activation_checkpointing.partition_activations && c.tensor_parallel.sequence_parallel) {
    diag.warnings.push_back("activation_checkpointing.partition_activations: no effect with zerocpp.sequence_parallel: "
                            "the checkpointed activations are split along the sequence already");
  }
  if (z.offload_optimizer.ratio < 1.0 && z.stage != 3) {
    diag.problem("zero_optimization.offload_optimizer.ratio",
                 "partial offloading (ratio < 1) needs stage 3, as DeepSpeed 0.15+ requires");
  }
  if (z.offload_optimizer.device == OffloadDevice::kNvme && z.offload_optimizer.nvme_path.empty()) {
    diag.problem("zero_optimization.offload_optimizer.nvme_path", "required when device is \"nvme\"");
  }
  if (z.offload_param.device == OffloadDevice::kNvme && z.offload_param.nvme_path.empty()) {
    diag.problem("zero_optimization.offload_param.nvme_path", "required when device is \"nvme\"");
  }
  const OptimizerType t = c.optimizer.type;
  bool tested = t == OptimizerType::kAdam || t == OptimizerType::kAdamW || t == OptimizerType::kCpuAdam ||
                t == OptimizerType::kAdagrad || t == OptimizerType::kLion;
  if (z.stage > 0 && t != OptimizerType::kNone && !tested && !c.zero_allow_untested_optimizer) {
    diag.problem("optimizer.type", "\"" + c.optimizer.type_name +
                                       "\" is untested with ZeRO: set zero_allow_untested_optimizer to true to use it");
  }
  if (z.offload_optimizer.device != OffloadDevice::kNone && c.zero_force_ds_cpu_optimizer &&
      t != OptimizerType::kNone && !tested) {
    diag.problem("optimizer.type",
                 "\"" + c.optimizer.type_name +
                     "\" has no CPU implementation for optimizer offload (Adam, AdamW, Adagrad and Lion do); "
                     "zero_force_ds_cpu_optimizer is true");
  }
}

}  // namespace zero::config_detail
