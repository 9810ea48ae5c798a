// zero::Config — a DeepSpeed JSON configuration, typed and validated.
//
// Parsing follows DeepSpeed (docs/config.md): the file is Hjson; duplicate keys are errors;
// unknown keys are errors where DeepSpeed refuses them and warnings where it ignores them (near
// misses stay errors, with a "did you mean"); "auto" with no rule takes DeepSpeed's default with a
// warning; integers may be written as 5e8; deprecated aliases are accepted with a warning; the
// keys of DeepSpeed features zerocpp does not implement are refused by name. All problems of a
// file are reported at once (ConfigError::problems).
//
// Two phases, because some values depend on things the file does not know:
//   auto config = zero::Config::parse_file("ds.json");   // syntax, types, ranges, cross-key rules
//   config.resolve({.world_size = 4, .hidden_size = 768}); // batch triad and every "auto"
// Config::from_file does both. Until resolve() succeeds, fields that were "auto" hold their
// DeepSpeed defaults and unresolved() lists their paths.
//
// This header is torch-free on purpose.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zero {

enum class OffloadDevice { kNone, kCpu, kNvme };
enum class CommDType { kModel, kFp32, kFp16, kBf16 };  // kModel: the model's own dtype
enum class OptimizerType { kNone, kAdam, kAdamW, kCpuAdam, kAdagrad, kLamb, kLion, kSgd };
// The last four are the Hugging Face Trainer's own schedules (--lr_scheduler_type linear, cosine,
// constant, constant_with_warmup), which a trainer sets when the config has no "scheduler" block;
// no config file names them.
enum class SchedulerType {
  kNone,
  kWarmupLR,
  kWarmupDecayLR,
  kWarmupCosineLR,
  kOneCycle,
  kLRRangeTest,
  kTrainerLinear,
  kTrainerCosine,
  kTrainerConstant,
  kTrainerConstantWithWarmup
};
enum class TagValidation { kIgnore, kWarn, kFail };

// Where an effective value came from, for `zero-config check`.
// kAutoDefault: the file says "auto" where no rule resolves it, so DeepSpeed's default applies.
enum class ValueSource { kDefault, kFile, kAuto, kAlias, kAutoDefault };

struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0;  // 0 = dynamic
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
  bool auto_cast = false;
};

struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  bool pin_memory = false;
  int64_t buffer_count = 4;
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool fast_init = false;
  double ratio = 1.0;
};

struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;
  bool pin_memory = false;
  int64_t buffer_count = 5;
  int64_t buffer_size = 100'000'000;
  int64_t max_in_cpu = 1'000'000'000;
};

struct ZeroConfig {
  int stage = 0;
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500'000'000;  // elements; "auto" = hidden²
  bool allgather_partitions = true;
  int64_t allgather_bucket_size = 500'000'000;
  bool overlap_comm = false;  // default depends on the stage: true at stage 3
  bool load_from_fp32_weights = true;
  bool round_robin_gradients = false;
  OffloadOptimizerConfig offload_optimizer;
  OffloadParamConfig offload_param;
  int64_t sub_group_size = 1'000'000'000;
  int64_t stage3_prefetch_bucket_size = 50'000'000;      // "auto" = 0.9·hidden²
  int64_t stage3_param_persistence_threshold = 100'000;  // "auto" = 10·hidden
  int64_t stage3_model_persistence_threshold = INT64_MAX;
  int64_t stage3_max_live_parameters = 1'000'000'000;
  int64_t stage3_max_reuse_distance = 1'000'000'000;
  bool stage3_gather_16bit_weights_on_model_save = false;
  // ZeRO++ (docs/zeropp.md): stage 3's forward gathers in int8 (qwZ); a secondary partition of
  // each gathered unit within groups of this many consecutive ranks, so backward gathers stay
  // within the node (hpZ; 1: off); gradient reduce-scatters in int4, in two hops (qgZ).
  bool zero_quantized_weights = false;
  // ZeRO++ for frozen parameters (a LoRA's base) at stage 3: their gathers in int8 as qwZ's.
  bool zero_quantized_nontrainable_weights = false;
  int zero_hpz_partition_size = 1;
  bool zero_quantized_gradients = false;
  bool elastic_checkpoint = false;
  bool ignore_unused_parameters = true;
};

struct AioConfig {
  int64_t block_size = 1'048'576;
  int64_t queue_depth = 8;
  int64_t intra_op_parallelism = 1;
  bool single_submit = false;
  bool overlap_events = true;
};

struct OptimizerConfig {
  OptimizerType type = OptimizerType::kNone;  // kNone: no "optimizer" block
  std::string type_name;                      // as written in the file
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool bias_correction = true;
  bool adam_w_mode = true;
  bool torch_adam = false;
  double max_coeff = 10.0, min_coeff = 0.01;  // Lamb
  double momentum = 0, dampening = 0;         // SGD
  bool nesterov = false;
};

struct SchedulerConfig {
  SchedulerType type = SchedulerType::kNone;
  // WarmupLR, WarmupDecayLR
  double warmup_min_lr = 0, warmup_max_lr = 1e-3;
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // "log" | "linear"
  int64_t total_num_steps = 0;      // required by WarmupDecayLR and WarmupCosineLR
  // (The Trainer's schedules use warmup_num_steps and total_num_steps, unclamped.)
  // WarmupCosineLR
  double warmup_min_ratio = 0, cos_min_ratio = 1e-4;
  // OneCycle
  double cycle_min_lr = 0, cycle_max_lr = 0, decay_lr_rate = 0;
  int64_t cycle_first_step_size = 2000, cycle_second_step_size = 2000;
  int64_t cycle_first_stair_count = 0, cycle_second_stair_count = 0, decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8, cycle_max_mom = 0.9, decay_mom_rate = 0;
  // LRRangeTest
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

struct MonitorConfig {  // tensorboard, csv_monitor
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";
};

struct CommsLoggerConfig {
  bool enabled = false, verbose = false, prof_all = true, debug = false;
  std::vector<std::string> prof_ops;
};

// zerocpp's own block (DeepSpeed has none): a Prometheus /metrics endpoint served by every rank
// on port + local rank (docs/observability.md).
struct PrometheusConfig {
  bool enabled = false;
  std::string host = "127.0.0.1";
  int port = 9400;
  std::string job_name = "zerocpp";  // the job_name label of every series
};

// The collective watchdog ("zerocpp": {"collective_timeout": s, "collective_warning": s}): a
// rank that has waited in one collective longer than `warning` says so; after `timeout` every
// waiting rank ends the job with an error naming the ranks that did not arrive. 0: off.
struct WatchdogConfig {
  double timeout_seconds = 1800;  // DeepSpeed's init_distributed default, 30 minutes
  double warning_seconds = 60;
};

// zerocpp's "bf16_compute" (its own block; DeepSpeed has none): where the matrix work of a bf16
// model runs on the CPU (docs/precision.md). LibTorch 1.13's bf16 matmul is fast only on a CPU with
// AVX512-BF16 or AMX-BF16; elsewhere it is ~20x slower than fp32. kFp32 widens each weight where
// it is used (parameters, gradients and communication stay bf16). kAuto: kNative where the CPU
// has bf16 instructions, kFp32 elsewhere. ZERO_BF16_COMPUTE=auto|native|fp32 overrides the file.
enum class Bf16Compute { kAuto, kNative, kFp32 };

struct FlopsProfilerConfig {
  bool enabled = false;
  int64_t profile_step = 1;
  int64_t module_depth = -1;
  int64_t top_modules = 1;
  bool detailed = true;
  std::string output_file;  // empty: stdout
  double peak_tflops = 0;   // zerocpp's: one rank's peak for MFU; 0: measured by a GEMM at start-up
};

struct ActivationCheckpointingConfig {
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  bool contiguous_memory_optimization = false;
  int64_t number_checkpoints = 0;  // 0: unset
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
};

struct CheckpointConfig {
  TagValidation tag_validation = TagValidation::kWarn;
  bool load_universal = false;
  bool use_node_local_storage = false;
};

// DeepSpeed's AutoTP training block ("tensor_parallel": {"autotp_size": 2, ...}; the seed's
// "tp_size" is the same key). The world is a grid of tensor-parallel groups of `size`
// consecutive ranks, and ZeRO partitions each rank's slice of the model over its data-parallel
// group: the ranks with the same place in their tensor-parallel groups (docs/tensor_parallel.md).
struct TensorParallelLayerSpec {
  std::vector<std::string> patterns;  // regular expressions over Hugging Face parameter names
  bool row = false;                   // "row" (the input dimension split) or "column" (the output)
};
struct TensorParallelConfig {
  int size = 1;               // 1: off
  std::string preset_model;   // "llama", "mistral", "qwen2", or empty (the model's own layout)
  bool use_default_specs = true;
  std::vector<TensorParallelLayerSpec> layer_specs;
  bool overlap_comm = false;  // tp_overlap_comm: accepted, has no effect (docs/tensor_parallel.md)
  std::string key = "tensor_parallel.autotp_size";  // the key the file gave the size under, for errors
  // zerocpp's "sequence_parallel" (in its "zerocpp" block): Megatron-SP, the activations between
  // the tensor-parallel regions split along the sequence.
  bool sequence_parallel = false;
};

// Pipeline parallelism (docs/pipeline_parallel.md): the seed's "pipeline_parallel": {"pp_size": N},
// or DeepSpeed's "pipeline" block (PipelineModule's arguments: "stages", "partition",
// "activation_checkpoint_interval", "pipe_partitioned", "grad_partitioned"). The world is then a
// grid of pipeline stages × data-parallel × tensor-parallel ranks (tensor-parallel innermost,
// pipeline outermost, as Megatron orders them), and a step's micro-batches are its
// gradient_accumulation_steps, run through the stages by the 1F1B schedule.
struct PipelineConfig {
  int stages = 1;  // 1: off
  // How the decoder layers are cut into stages: "parameters" (balance the parameter counts, the
  // embedding and the head included), "uniform" (balance the decoder layers) or "type:REGEX"
  // (balance the layers whose type the regular expression matches).
  std::string partition_method = "parameters";
  int64_t activation_checkpoint_interval = 0;  // 0: none
  // With tensor parallelism: each member sends 1/TP of an activation (of a gradient) to the next
  // (previous) stage, which all-gathers it over its group (DeepSpeed's defaults: both on).
  bool pipe_partitioned = true, grad_partitioned = true;
  std::string key = "pipeline_parallel.pp_size";  // the key the file gave the size under, for errors
};

// DeepSpeed's "expert_parallel" block (AutoEP): the experts of each MoE layer split over groups
// of `size` ranks (docs/moe.md). Read and checked; training with size > 1 is not built yet.
struct ExpertParallelConfig {
  bool enabled = false;
  int size = 1;                 // autoep_size
  std::string preset_model;     // "mixtral", "qwen2_moe" (or DeepSpeed's "qwen3_moe", which covers it); "": the model's
  std::string key = "expert_parallel.autoep_size";
};

// What "auto" resolves from: the world, the model and the trainer's flags (HuggingFace's names).
// A flag left empty leaves its "auto" keys unresolved, which resolve() reports as an error.
struct AutoContext {
  int world_size = 1;
  std::optional<int64_t> hidden_size;
  std::optional<int64_t> micro_batch_size;  // per_device_train_batch_size
  std::optional<int64_t> gradient_accumulation_steps;
  std::optional<double> learning_rate;
  std::optional<double> weight_decay;
  std::optional<double> adam_beta1, adam_beta2, adam_epsilon;
  std::optional<double> max_grad_norm;
  std::optional<int64_t> warmup_steps;
  std::optional<int64_t> max_steps;
  std::optional<bool> fp16, bf16;
  // For tools that only inspect a file: "auto" keys that cannot be resolved stay listed in
  // unresolved() instead of being errors.
  bool allow_unresolved = false;
};

// One effective value as printed by `zero-config check`.
struct ConfigValue {
  std::string path;   // "zero_optimization.reduce_bucket_size"
  std::string value;  // JSON text of the effective value, or "auto"
  ValueSource source;
};

class Config {
 public:
  // Parses (Hjson, as DeepSpeed does) and validates; throws ConfigError listing every problem.
  // `origin` names the text in messages (a file name). `strict` (or the file's "zerocpp":
  // {"strict": true}) makes every unknown key and every "auto" no rule resolves an error;
  // otherwise those DeepSpeed ignores or defaults are warnings (docs/config.md).
  static Config parse(const std::string& json_text, const std::string& origin = "<string>", bool strict = false);
  static Config parse_file(const std::string& path, bool strict = false);
  // The file as zerocpp's Hjson reader sees it, printed as JSON (`zero-config json`). Throws
  // ConfigError on a syntax error.
  static std::string document_as_json(const std::string& path);
  // parse_file + resolve: the usual entry point.
  static Config from_file(const std::string& path, const AutoContext& context);

  // Resolves the batch triad against context.world_size and every "auto" from the context.
  // Throws ConfigError naming each key that cannot be resolved or is inconsistent.
  void resolve(const AutoContext& context);

  // Paths still "auto" (empty after a successful resolve()).
  const std::vector<std::string>& unresolved() const { return unresolved_; }
  bool resolved() const { return resolved_; }
  // Deprecated aliases used, features accepted but switched off, and similar notes.
  const std::vector<std::string>& warnings() const { return warnings_; }
  // Every effective value with where it came from, in file order.
  const std::vector<ConfigValue>& values() const { return values_; }
  const std::string& origin() const { return origin_; }

  // The batch triad; 0 until resolve().
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
  // The data-parallel world size the triad was resolved against: the world size over the
  // tensor-parallel size (DeepSpeed's train_batch_size counts data-parallel ranks only).
  int world_size = 0;

  double gradient_clipping = 0;
  int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  bool memory_breakdown = false;
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  CommDType communication_data_type = CommDType::kModel;
  CommDType grad_accum_dtype = CommDType::kFp32;
  bool zero_allow_untested_optimizer = false;
  bool zero_force_ds_cpu_optimizer = true;
  int64_t seed = 1234;

  Fp16Config fp16;
  bool bf16 = false;
  ZeroConfig zero;
  TensorParallelConfig tensor_parallel;
  PipelineConfig pipeline;
  ExpertParallelConfig expert_parallel;
  AioConfig aio;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  CheckpointConfig checkpoint;
  MonitorConfig tensorboard, csv_monitor;
  CommsLoggerConfig comms_logger;
  FlopsProfilerConfig flops_profiler;
  PrometheusConfig prometheus;
  WatchdogConfig watchdog;
  Bf16Compute bf16_compute = Bf16Compute::kAuto;
  // zerocpp's "encrypt_swap": NVMe offload's swap files sealed with AES-256-GCM under a key held
  // only in memory (docs/engine.md, src/offload/swap_cipher.h).
  bool encrypt_swap = false;
  ActivationCheckpointingConfig activation_checkpointing;

 private:
  std::string origin_;
  // The batch triad as written in the file (0 = absent or "auto"), kept so resolve() can rerun.
  int64_t given_train_batch_size_ = 0, given_micro_batch_ = 0, given_accumulation_ = 0;
  std::vector<std::string> autos_;  // every path written as "auto"
  bool fp16_auto_ = false, bf16_auto_ = false;
  std::vector<std::string> warnings_;
  std::vector<std::string> parse_warnings_;  // warnings_ is these plus the last resolve()'s
  std::vector<std::string> unresolved_;
  std::vector<ConfigValue> values_;
  bool resolved_ = false;
};

const char* to_string(OffloadDevice device);
const char* to_string(Bf16Compute compute);  // "auto", "native", "fp32"
const char* to_string(ValueSource source);

}  // namespace zero
