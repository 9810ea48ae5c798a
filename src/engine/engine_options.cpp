// How a DeepSpeed config becomes the engine's options (engine_options.h).
#include "engine/engine_options.h"

#include <fmt/core.h>

#include "zero/communicator.h"
#include "zero/error.h"

namespace zero::engine {
namespace {

// A swap under `dir` with the aio block's settings and encrypt_swap (NVMe offload).
SwapOptions swap_under(const std::string& dir, int64_t buffer_count, const Config& config, int rank) {
  return SwapOptions{.dir = dir, .aio = offload::aio_options(config), .buffer_count = buffer_count, .rank = rank};
}

}  // namespace

// How the stage's gradients are kept and reduced (bucket.h).
ReducerOptions reducer_options(const Config& config) {
  ReducerOptions o;
  o.gradients = config.zero.stage >= 2 ? ReducerOptions::Gradients::kStreamedIntoShards
                                       : ReducerOptions::Gradients::kInBucketBuffers;
  o.whole_buckets = config.zero.stage == 0;
  o.overlap = config.zero.overlap_comm;
  o.prescale = config.prescale_gradients;
  o.predivide_factor = config.gradient_predivide_factor;
  o.reduce_scatter = config.zero.reduce_scatter;
  o.quantize_bits = config.zero.zero_quantized_gradients ? 4 : 0;  // DeepSpeed's qgZ: int4 both hops
  o.allgather_bucket_size = config.zero.allgather_bucket_size;
  switch (config.communication_data_type) {
    case CommDType::kFp32:
      o.wire_dtype = at::kFloat;
      break;
    case CommDType::kFp16:
      o.wire_dtype = at::kHalf;
      break;
    case CommDType::kBf16:
      o.wire_dtype = at::kBFloat16;
      break;
    case CommDType::kModel:
      break;
  }
  return o;
}

// ZeRO++ at stage 3: qwZ's int8 gathers, and hpZ's groups of consecutive ranks (each within one
// host, so that the gathers from them never leave it).
Stage3Zeropp stage3_zeropp(const Config& config, Communicator& comm, const World& world) {
  Stage3Zeropp z;
  z.weight_bits = config.zero.zero_quantized_weights ? 8 : 0;
  const int hpz = config.zero.zero_hpz_partition_size, rank = world.rank();
  if (hpz <= 1) return z;
  if (world.size() % hpz != 0) {
    throw Error("zero_hpz_partition_size " + std::to_string(hpz) + " does not divide the world size " +
                    std::to_string(world.size()),
                "zero_optimization.zero_hpz_partition_size", rank);
  }
  const int first = rank / hpz * hpz;
  std::string error;
  for (int r = first; r < first + hpz && error.empty(); ++r) {
    if (world.node_of(r) != world.node_of(first)) {
      error = fmt::format("zero_hpz_partition_size {} groups ranks {}-{}, but they are on hosts {} and {}: "
                          "hpZ's secondary partition must stay within one host (this host has {} ranks)",
                          hpz, first, first + hpz - 1, world.host(first), world.host(r), world.local_size());
    }
  }
  // Only some groups may cross hosts: every rank learns it before the split, which all must call.
  agree(comm, error, rank, "zero_optimization.zero_hpz_partition_size");
  z.secondary_group = comm.split(rank / hpz, rank);
  return z;
}


// offload_optimizer.device "nvme": where and how the optimizer's swap file is streamed.
std::optional<SwapOptions> swap_options(const Config& config, int rank) {
  const OffloadOptimizerConfig& o = config.zero.offload_optimizer;
  if (o.device != OffloadDevice::kNvme) return std::nullopt;
  SwapOptions swap = swap_under(o.nvme_path, o.buffer_count, config, rank);
  swap.pipeline_read = o.pipeline_read;
  swap.pipeline_write = o.pipeline_write;
  return swap;
}

// offload_param.device "nvme" (stage 3): where the persistent parameter shards are swapped.
std::optional<SwapOptions> param_swap_options(const Config& config, int rank) {
  const OffloadParamConfig& o = config.zero.offload_param;
  if (o.device != OffloadDevice::kNvme) return std::nullopt;
  return swap_under(o.nvme_path, o.buffer_count, config, rank);
}

void check_config(const Config& config, const World& world) {
  if (!config.resolved() || config.world_size != world.size()) {
    throw Error("the config must be resolved for world size " + std::to_string(world.size()) +
                    " (Config::from_file or Config::resolve)",
                config.origin());
  }
  // Offload: CPU needs nothing more of a CPU build (every state is in host memory already);
  // NVMe swaps the optimizer (partition.h) and stage 3's parameter shards (stage3.h).
  if (config.optimizer.type == OptimizerType::kNone) {
    throw Error("the config has no \"optimizer\" block: the engine builds its optimizer from it", "optimizer");
  }
}

// Settings the config accepts that this engine does not act on yet: said once, by name.
std::vector<std::string> unhonoured_settings(const Config& c, bool on_gpu) {
  std::vector<std::string> out;
  auto note = [&](bool set, const char* key, const char* what) {
    if (set) out.push_back(std::string(key) + ": " + what);
  };
  const ZeroConfig& z = c.zero;
  note(!z.contiguous_gradients, "zero_optimization.contiguous_gradients", "ignored: gradients are always contiguous");
  note(!z.allgather_partitions, "zero_optimization.allgather_partitions",
       "ignored: partitions are always all-gathered");
  note(z.round_robin_gradients, "zero_optimization.round_robin_gradients", "not implemented yet");
  // Stage 2 accumulates in fp32; stages 0/1 accumulate in .grad, which autograd keeps in the
  // model's dtype: with a 16-bit model and several micro-steps that is not the fp32 asked for.
  const bool sixteen_bit = c.bf16 || c.fp16.enabled;
  note(c.grad_accum_dtype != CommDType::kFp32 || (sixteen_bit && c.zero.stage < 2 && c.gradient_accumulation_steps > 1),
       "data_types.grad_accum_dtype", "not honoured: stage 2 accumulates in fp32, stages 0/1 in the model's dtype");
  note(c.fp16.auto_cast, "fp16.auto_cast", "not implemented yet: give the model fp16 inputs");
  // The flops profiler counts the whole model from Engine::set_model_cost: no per-module table.
  note(c.flops_profiler.enabled && (c.flops_profiler.module_depth != -1 || c.flops_profiler.top_modules != 1),
       "flops_profiler.module_depth/top_modules", "no per-module breakdown: the profile is of the whole model");
  // On the CPU the offloaded states stay where they are, with nothing to pin or to split between
  // a device and the host. On a GPU the optimizer's states move to host memory (docs/gpu.md), the
  // rest of DeepSpeed's offload is not built there yet.
  const bool offloading = z.offload_optimizer.device == OffloadDevice::kCpu || z.offload_param.device == OffloadDevice::kCpu;
  note(offloading && (z.offload_optimizer.pin_memory || z.offload_param.pin_memory), "zero_optimization.offload_*.pin_memory",
       on_gpu ? "not honoured on a GPU yet: offloaded states are copied through pageable memory"
              : "no effect on a CPU build (no device copies to pin for)");
  note(z.offload_optimizer.device == OffloadDevice::kCpu && z.offload_optimizer.ratio < 1.0,
       "zero_optimization.offload_optimizer.ratio",
       on_gpu ? "not honoured on a GPU yet: every optimizer state is offloaded"
              : "no effect on a CPU build (every optimizer state is in host memory, offloaded or not)");
  note(on_gpu && z.offload_param.device == OffloadDevice::kCpu, "zero_optimization.offload_param.device",
       "\"cpu\" is not honoured on a GPU yet: stage 3's parameter shards stay on the device");
  // NVMe: one io_uring ring per swap file keeps queue_depth pieces in flight from the training
  // thread; stage 3's shard pool is two buffers of the largest unit shard, whatever the sizes.
  const bool nvme = z.offload_optimizer.device == OffloadDevice::kNvme || z.offload_param.device == OffloadDevice::kNvme;
  note(nvme && c.aio.intra_op_parallelism > 1, "aio.intra_op_parallelism",
       "no effect: io_uring submits from the training thread, with queue_depth pieces in flight (no I/O threads)");
  note(nvme && !c.aio.overlap_events, "aio.overlap_events",
       "no effect: io_uring always refills the queue as pieces complete");
  note(z.offload_param.device == OffloadDevice::kNvme &&
           (z.offload_param.buffer_count != 5 || z.offload_param.buffer_size != 100'000'000 ||
            z.offload_param.max_in_cpu != 1'000'000'000),
       "zero_optimization.offload_param.buffer_count/buffer_size/max_in_cpu",
       "not honoured: a unit's shard is read into one of two pooled buffers the size of the largest shard");
  // Activation checkpointing is the model's to call (checkpointing::checkpoint); these options
  // shape it on a GPU build.
  const ActivationCheckpointingConfig& ac = c.activation_checkpointing;
  note(ac.cpu_checkpointing, "activation_checkpointing.cpu_checkpointing",
       on_gpu ? "not honoured on a GPU yet: the saved block inputs stay on the device"
              : "no effect on a CPU build (the saved block inputs are in host memory already)");
  note(ac.synchronize_checkpoint_boundary, "activation_checkpointing.synchronize_checkpoint_boundary",
       on_gpu ? "not honoured on a GPU yet" : "no effect on a CPU build (no device stream to synchronize)");

  return out;
}

bool check_expert_parallel(const ModelParallelOptions& options, const Config& config, const World& world,
                           at::Device device, bool built_partitioned) {
  if (!options.expert_parallel || options.expert_parallel->size() == 1) return false;
  const std::string key = config.expert_parallel.key.empty() ? "expert_parallel.autoep_size" : config.expert_parallel.key;
  const int rank = world.rank();
  if (!options.expert_data_parallel || !options.is_expert ||
      options.expert_parallel->size() * options.expert_data_parallel->size() != world.size()) {
    throw Error("expert parallelism: the expert-parallel and expert-data-parallel groups must cut the engine's " +
                    std::to_string(world.size()) + " ranks, and the model must say which parameters are experts'",
                key, rank);
  }
  auto refuse = [&](const std::string& what, const std::string& refused_key) {
    throw Error("expert parallelism (" + key + " " + std::to_string(options.expert_parallel->size()) + ") with " + what +
                    " is not built yet",
                refused_key, rank);
  };
  if ((options.group && options.group->size() > 1) || (options.pipeline && options.pipeline->size() > 1))
    refuse("tensor or pipeline parallelism", key);
  if (!device.is_cpu()) refuse("a model on " + device.str(), key);
  if (built_partitioned) refuse("a model built under zero::Init", "zero_optimization.stage");
  if (config.zero.zero_hpz_partition_size > 1) refuse("hpZ", "zero_optimization.zero_hpz_partition_size");
  if (config.optimizer.type == OptimizerType::kLamb) refuse("Lamb (its norms are per whole parameter)", "optimizer.type");
  return true;
}

}  // namespace zero::engine
