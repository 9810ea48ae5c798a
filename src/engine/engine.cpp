#include "zero/engine.h"

#include <ATen/ATen.h>
#include <fmt/core.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

#include "comm/device_communicator.h"
#include "comm/progress.h"
#include "engine/compute_choice.h"
#include "engine/engine_options.h"
#include "engine/engine_state.h"
#include "engine/flat_params.h"
#include "engine/bucket.h"
#include "engine/partition.h"
#include "engine/parameter_slices.h"
#include "engine/partitioned_init.h"
#include "layout/bucket_layout.h"
#include "optim/cpu_kernels.h"
#include "optim/flat_optimizer.h"
#include "zero/allocator.h"
#include "zero/activation_checkpoint.h"
#include "zero/compute.h"
#include "zero/error.h"
#include "zero/loss_scaler.h"
#include "zero/lr_schedule.h"

namespace zero {
namespace {

at::Device model_device(torch::nn::Module& model) {
  for (const auto& p : model.parameters())
    if (p.requires_grad()) return p.device();
  return at::kCPU;
}

// The distinct trainable (or frozen) parameters in registration order (a tied parameter appears once).
std::vector<at::Tensor> distinct_parameters(torch::nn::Module& model, bool trainable) {
  std::vector<at::Tensor> params;
  std::unordered_set<const void*> seen;
  for (auto& p : model.parameters()) {
    if (p.requires_grad() == trainable && seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
  }
  return params;
}

std::vector<at::Tensor> trainable_parameters(torch::nn::Module& model) { return distinct_parameters(model, true); }

}  // namespace

Engine::Engine(torch::nn::Module& model, const Config& config, World& world, const std::vector<ParamGroup>& groups,
               const ModelParallelOptions& tensor_parallel) {
  engine::check_config(config, world);
  optim::limit_simd(std::getenv("ZERO_SIMD"));  // before the first kernel runs
  // The model trains where its parameters are (moved there before the engine is built, as
  // DeepSpeed's engine finds the model on its device); the engine's buffers follow them.
  const at::Device device = model_device(model);
  state_ = std::make_unique<State>(config, world, make_device_communicator(world, device));
  State& s = *state_;
  s.model = &model;
  // What the config reader warned about (keys DeepSpeed ignores, "auto" defaults, ...), then
  // the settings this engine does not honour.
  s.warnings = config.warnings();
  for (auto& w : engine::unhonoured_settings(config, !device.is_cpu())) s.warnings.push_back(std::move(w));
  if (world.rank() == 0) {
    for (const auto& w : s.warnings) std::fprintf(stderr, "zerocpp: warning: %s\n", w.c_str());
  }
  // Units built under zero::Init hold only shards (already in the training dtype): checked and
  // compared across ranks, never broadcast or cast.
  const engine::PartitionedUnits partitioned = engine::find_partitioned_units(model);
  if (!partitioned.units.empty() && config.zero.stage != 3) {
    throw Error("the model was built under zero::Init, which partitions it for stage 3, but the config says stage " +
                    std::to_string(config.zero.stage),
                "zero_optimization.stage", world.rank());
  }
  // DeepSpeed casts the module to the training precision before anything else: dtypes must be
  // final before hooks are attached (changing one drops the gradient accumulator).
  const at::ScalarType dtype = engine::training_dtype(
      config, partitioned.units.empty() ? at::kFloat : partitioned.units.front().second->partitioned()->buffer.scalar_type());
  engine::verify_partitioned_units(partitioned, s.comm, dtype);
  if (config.bf16 || config.fp16.enabled) {
    // Floating-point tensors only, as PyTorch's Module.to(dtype) (LibTorch's casts integers too:
    // a 4-bit base's codes and scales are bytes and stay so).
    at::NoGradGuard no_grad;
    for (auto& p : model.parameters()) {
      if (at::isFloatingType(p.scalar_type()) && p.scalar_type() != dtype) p.set_data(p.to(dtype));
    }
    for (auto& b : model.buffers()) {
      if (at::isFloatingType(b.scalar_type()) && b.scalar_type() != dtype) b.set_data(b.to(dtype));
    }
  }
  // Where bf16 matrix work runs (zero/compute.h): one path on every rank. Only a bf16 model
  // left to "auto" asks the other ranks' CPUs (4 bytes, counted like any collective).
  const CpuFeatures cpu = cpu_features();
  const char* bf16_env = std::getenv("ZERO_BF16_COMPUTE");
  // (On a GPU every matrix product is the device's own: native.)
  bool every_cpu_native = cpu.native_bf16() || !device.is_cpu();
  if (device.is_cpu() && dtype == at::kBFloat16 && engine::choose_bf16_compute(config.bf16_compute, bf16_env, true).asked == Bf16Compute::kAuto) {
    at::Tensor native = at::full({1}, every_cpu_native ? 1 : 0, at::kInt);
    s.comm.all_reduce(native, ReduceOp::kMin, {.async = false});
    every_cpu_native = native.item<int>() == 1;
  }
  const engine::ComputeChoice compute_choice =
      engine::choose_bf16_compute(config.bf16_compute, bf16_env, every_cpu_native);
  set_bf16_compute_in_fp32(compute_choice.bf16_in_fp32);
  checkpointing::set_profiling(config.activation_checkpointing.profile);
  checkpointing::set_contiguous(config.activation_checkpointing.contiguous_memory_optimization);
  const bool expert_parallel = engine::check_expert_parallel(tensor_parallel, config, world, device,
                                                              !partitioned.units.empty());
  if (expert_parallel) {
    s.expert_parallel = tensor_parallel.expert_parallel;
    s.expert_data_comm =
        std::make_unique<CountingCommunicator>(tensor_parallel.expert_data_parallel->communicator(), s.stats);
  }
  {
    at::NoGradGuard no_grad;
    // Every rank starts from rank 0's weights and buffers; an expert from the first rank of its
    // expert-data-parallel group (rank 0 holds other experts).
    for (const auto& item : model.named_parameters()) {
      if (partitioned.contains(item.value())) continue;
      const bool expert = expert_parallel && tensor_parallel.is_expert(item.key());
      (expert ? static_cast<Communicator&>(*s.expert_data_comm) : s.comm)
          .broadcast(item.value().detach(), 0, {.async = false});
    }
    for (auto& b : model.buffers()) s.comm.broadcast(b.detach(), 0, {.async = false});
  }
  const int partitions = config.zero.stage == 0 ? 1 : world.size();
  std::vector<at::Tensor> params = trainable_parameters(model);
  {
    std::unordered_map<const void*, std::string> name_of;  // a tied parameter keeps its first name
    for (const auto& item : model.named_parameters()) name_of.emplace(item.value().unsafeGetTensorImpl(), item.key());
    for (const auto& p : params) s.param_names.push_back(name_of.at(p.unsafeGetTensorImpl()));
  }
  s.slices = engine::slice_parameters(params, s.param_names, tensor_parallel, world.rank());
  if (tensor_parallel.group && tensor_parallel.group->size() > 1) {
    // The gradient norm counts whole parameters on one member, from their owned gradients; at
    // stages 2-3 with the optimizer on NVMe those stream to the swap file instead.
    if (config.zero.stage >= 2 && config.zero.offload_optimizer.device == OffloadDevice::kNvme) {
      throw Error("offload_optimizer.device \"nvme\" at stage " + std::to_string(config.zero.stage) +
                      " with tensor parallelism is not supported yet",
                  "zero_optimization.offload_optimizer.device", world.rank());
    }
    s.tensor_parallel = tensor_parallel.group;
    for (size_t i = 0; i < params.size(); ++i)
      if (s.slices[i].dim < 0) s.replicated_params.push_back(static_cast<int>(i));
  }
  if (tensor_parallel.pipeline && tensor_parallel.pipeline->size() > 1) s.pipeline = tensor_parallel.pipeline;
  const bool stage3 = config.zero.stage == 3;
  engine::UnitMap units;
  engine::FrozenUnits frozen_units;
  const std::vector<at::Tensor> frozen = distinct_parameters(model, false);
  if (stage3) {
    units = engine::find_units(model, params, s.param_names);
    // DeepSpeed's persistence thresholds: small parameters stay whole on every rank (in the root
    // unit), up to a total of stage3_model_persistence_threshold elements.
    // Units built under zero::Init decided as they were built: what they sharded stays sharded.
    int64_t persisted = 0;
    const int root = static_cast<int>(units.units.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const int64_t n = params[i].numel();
      const int group = units.group_of[i];
      const bool built_partitioned = group != root && units.units[static_cast<size_t>(group)]->partitioned();
      if (built_partitioned) {
        if (partitioned.contains(params[i])) continue;
        persisted += n;  // zero::Init kept it whole: it counts against the model's budget too
      } else if (group == root || !engine::stays_whole(config.zero, persisted, n)) {
        continue;
      }
      units.group_of[i] = root;
    }
    // The frozen parameters (a LoRA's base), partitioned by the same units and thresholds, in a
    // group of their own: no gradients, no master, no optimizer state, not in checkpoints.
    const bool split_model = expert_parallel || (tensor_parallel.group && tensor_parallel.group->size() > 1);
    if (!frozen.empty() && !split_model) {
      std::unordered_map<const void*, std::string> name_of;
      for (const auto& item : model.named_parameters()) name_of.emplace(item.value().unsafeGetTensorImpl(), item.key());
      std::vector<std::string> frozen_names;
      for (const auto& p : frozen) frozen_names.push_back(name_of.at(p.unsafeGetTensorImpl()));
      std::vector<int> group_of = engine::find_units(model, frozen, frozen_names).group_of;
      for (size_t i = 0; i < frozen.size(); ++i) {
        if (group_of[i] != root && engine::stays_whole(config.zero, persisted, frozen[i].numel())) group_of[i] = root;
      }
      // A group per dtype, in the order the dtypes first appear.
      std::vector<at::ScalarType> dtypes;
      for (const auto& p : frozen)
        if (std::find(dtypes.begin(), dtypes.end(), p.scalar_type()) == dtypes.end()) dtypes.push_back(p.scalar_type());
      engine::ReducerOptions no_gradients;
      no_gradients.gradients = engine::ReducerOptions::Gradients::kNone;
      for (const at::ScalarType dtype : dtypes) {
        std::vector<at::Tensor> of_dtype;
        engine::FrozenGroup group;
        for (size_t i = 0; i < frozen.size(); ++i) {
          if (frozen[i].scalar_type() != dtype) continue;
          of_dtype.push_back(frozen[i]);
          group.group_of.push_back(group_of[i]);
        }
        s.frozen_flat.push_back(std::make_unique<engine::FlatParams>(std::move(of_dtype), partitions,
                                                                     engine::kWholeGroupBucket, group.group_of));
        s.frozen_buckets.push_back(std::make_unique<engine::BucketGroup>(*s.frozen_flat.back(), s.comm, no_gradients));
        group.buckets = s.frozen_buckets.back().get();
        frozen_units.groups.push_back(std::move(group));
      }
      frozen_units.weight_bits = config.zero.zero_quantized_nontrainable_weights ? 8 : 0;
    }
  }
  if (s.frozen_buckets.empty()) {
    for (const auto& p : frozen) s.frozen_bytes += static_cast<int64_t>(p.nbytes());
  }
  // Stage 3: a bucket per unit (its gather and its reduction), whatever reduce_bucket_size says.
  std::vector<at::Tensor> adopted;  // per unit: the bucket zero::Init made
  for (const UnitBase* unit : units.units)
    adopted.push_back(unit->partitioned() ? unit->partitioned()->buffer : at::Tensor());
  // Expert parallelism: the experts are replica group 1, held alike by the expert-data-parallel group.
  layout::ReplicaGroups replicas;
  std::vector<Communicator*> replica_comms;
  if (expert_parallel) {
    for (size_t i = 0; i < params.size(); ++i) {
      const bool expert = tensor_parallel.is_expert(s.param_names[i]);
      replicas.of_param.push_back(expert ? 1 : 0);
      if (expert) s.expert_params.push_back(static_cast<int>(i));
    }
    replicas.partitions = {partitions, config.zero.stage == 0 ? 1 : s.expert_data_comm->size()};
    replica_comms.push_back(s.expert_data_comm.get());
    s.is_expert = tensor_parallel.is_expert;
    s.expert_view = engine::exchange_expert_view(s.comm, tensor_parallel.expert_parallel->communicator(),
                                                 *s.expert_data_comm, s.param_names);
  }
  // reduce_bucket_size 0 is DeepSpeed's too: every parameter its own bucket.
  s.flat = std::make_unique<engine::FlatParams>(
      std::move(params), partitions,
      stage3 ? engine::kWholeGroupBucket : std::max<int64_t>(1, config.zero.reduce_bucket_size), units.group_of,
      adopted, replicas);
  std::vector<int> owned_shards{s.flat->layout().owned_shard(world.rank())};
  if (expert_parallel) owned_shards.push_back(s.flat->layout().owned_shard(1, s.expert_data_comm->rank()));
  // Stage 3 reduces gradients exactly as stage 2: into fp32-accumulated owned shards, which the
  // partition holds.
  // ZeRO-Offload: with the model on a GPU and offload_optimizer.device "cpu" (or "nvme"), the
  // master, the moments and the accumulated gradients are in host memory and the CPU Adam steps
  // them; otherwise they live beside the parameters.
  const bool optimizer_on_host = config.zero.offload_optimizer.device != OffloadDevice::kNone;
  s.partition = std::make_unique<engine::Partition>(*s.flat, s.comm, owned_shards, config.zero.stage >= 2,
                                                    engine::swap_options(config, world.rank()),
                                                    optimizer_on_host ? at::Device(at::kCPU) : device);
  s.buckets = std::make_unique<engine::BucketGroup>(*s.flat, s.comm, engine::reducer_options(config),
                                                    s.partition->gradient_home(), replica_comms);
  if (stage3) {
    s.stage3 = std::make_unique<engine::Stage3>(
        *s.buckets, std::move(units),
        engine::Stage3Limits{.prefetch_bucket = config.zero.stage3_prefetch_bucket_size,
                             .max_live = config.zero.stage3_max_live_parameters,
                             .max_reuse_distance = config.zero.stage3_max_reuse_distance},
        engine::param_swap_options(config, world.rank()), engine::stage3_zeropp(config, s.comm, world),
        std::move(frozen_units));
  }
  s.telemetry = std::make_unique<engine::Telemetry>(s.config, world, *s.stats, tensor_parallel);  // the engine's own copy: it outlives the caller's
  comm_detail::WatchdogOptions watch =
      comm_detail::watchdog_options(config.watchdog.timeout_seconds, config.watchdog.warning_seconds);
  watch.on_wait = [telemetry = s.telemetry.get()](double seconds) { telemetry->on_wait(seconds); };
  s.watchdog = comm_detail::Watchdog::start(world, watch);
  s.partition->make_master(*s.buckets);
  s.partition->make_optimizer(config.optimizer, groups, config.zero.sub_group_size, world.rank());
  const bool offloading = config.zero.offload_optimizer.device != OffloadDevice::kNone ||
                          config.zero.offload_param.device != OffloadDevice::kNone;
  if (const std::string& why = s.partition->swap_warning(); !why.empty()) {
    std::fprintf(stderr, "zerocpp: warning: rank %d: %s\n", world.rank(), why.c_str());
  }
  if (world.rank() == 0) {
    for (const auto& line : engine::describe_compute(compute_choice, cpu, every_cpu_native, dtype == at::kBFloat16)) {
      std::fprintf(stderr, "zerocpp: %s\n", line.c_str());
    }
  }
  if (!offloading && world.rank() == 0) {
    const MemoryReport r = memory_report();
    auto mb = [](int64_t bytes) { return static_cast<double>(bytes) / 1e6; };
    const std::string frozen = r.frozen_parameters > 0 ? fmt::format("frozen parameters {:.1f} MB, ", mb(r.frozen_parameters)) : "";
    std::fprintf(stderr,
                 "zerocpp: per rank: %sparameters %.1f MB (%s), gradients %.1f MB, fp32 master %.1f MB, optimizer state "
                 "%.1f MB\n",
                 frozen.c_str(), mb(r.parameters), dtype == at::kBFloat16 ? "bf16" : dtype == at::kHalf ? "fp16" : "fp32",
                 mb(r.gradients), mb(r.master_weights), mb(r.optimizer_state));
  }
  if (offloading && world.rank() == 0) {
    // The memory plan of an offloaded run, before its first step (rank 0 speaks for every rank:
    // partitions differ by padding only).
    const MemoryReport r = memory_report();
    auto mb = [](int64_t bytes) { return static_cast<double>(bytes) / 1e6; };
    std::fprintf(stderr,
                 "zerocpp: offload (%s); per rank: parameters %.1f MB, gradients %.1f MB, fp32 master %.1f MB, "
                 "optimizer state %.1f MB, swap buffers %.1f MB; on NVMe: %.1f MB%s%s\n",
                 device.is_cpu() ? "on the CPU: what is not on NVMe is in host memory"
                                 : "parameters on the GPU; master, optimizer states and accumulated gradients in host memory",
                 mb(r.parameters), mb(r.gradients), mb(r.master_weights), mb(r.optimizer_state), mb(r.swap_buffers),
                 mb(r.on_nvme), r.on_nvme > 0 ? " under " : "",
                 r.on_nvme == 0                                              ? ""
                 : config.zero.offload_optimizer.device == OffloadDevice::kNvme ? config.zero.offload_optimizer.nvme_path.c_str()
                                                                             : config.zero.offload_param.nvme_path.c_str());
    if (config.zero.offload_optimizer.device == OffloadDevice::kNvme) {
      std::fprintf(stderr,
                   "zerocpp: optimizer on NVMe: tiles of %lld elements (sub_group_size %lld, at most %lld), a pool of "
                   "%.1f MB\n",
                   static_cast<long long>(s.partition->largest_tile()), static_cast<long long>(config.zero.sub_group_size),
                   static_cast<long long>(engine::Partition::kLargestTile), mb(r.swap_buffers));
    }
  }
}

Engine::~Engine() = default;

namespace {

// memory_breakdown prints on the boundary micro-step of a print step.
bool prints_memory(const Engine& e, const Config& c) {
  return c.memory_breakdown && c.steps_per_print > 0 && e.is_gradient_accumulation_boundary() &&
         (e.global_steps() + 1) % c.steps_per_print == 0;
}

}  // namespace

at::Tensor Engine::forward(const std::function<at::Tensor()>& fn) {
  State& s = *state_;
  comm_detail::set_progress_step(s.global_steps + 1);
  at::Tensor out;
  {
    auto timed = s.telemetry->time(engine::Phase::kForward);
    if (!s.stage3) {
      out = fn();
    } else {
      struct Scope {  // the forward's unit order is followed even if fn throws half-way
        engine::Stage3& stage3;
        explicit Scope(engine::Stage3& s) : stage3(s) { stage3.begin_forward(); }
        ~Scope() { stage3.end_forward(); }
      } scope(*s.stage3);
      out = fn();
    }
  }
  if (prints_memory(*this, s.config)) s.telemetry->memory_line("forward", s.global_steps + 1, memory_report());
  return out;
}

bool Engine::is_gradient_accumulation_boundary() const {
  return (state_->micro_steps + 1) % state_->config.gradient_accumulation_steps == 0;
}

void Engine::backward(const at::Tensor& loss) {
  State& s = *state_;
  if (s.telemetry->wants_loss()) s.telemetry->record_loss(loss.item<double>());
  // DeepSpeed scales the loss by 1/gradient_accumulation_steps (and by the fp16 loss scale).
  run_backward([&] { (loss * (loss_scale() / static_cast<double>(s.config.gradient_accumulation_steps))).backward(); });
}

void Engine::backward(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& output_grads) {
  run_backward([&] { torch::autograd::backward(outputs, output_grads); });
}

void Engine::run_backward(const std::function<void()>& autograd_backward) {
  State& s = *state_;
  const bool boundary = is_gradient_accumulation_boundary();
  s.boundary_unreduced = boundary && s.no_sync;
  {
    auto timed = s.telemetry->time(engine::Phase::kBackward);
    s.buckets->begin_backward(!s.no_sync && (s.config.zero.stage >= 2 || boundary));
    {
      auto inner = s.telemetry->time(engine::Phase::kBackwardInner);
      autograd_backward();
    }
    {
      auto reduce = s.telemetry->time(engine::Phase::kBackwardReduce);
      s.buckets->end_backward();
    }
    if (s.stage3) {
      s.buckets->release_all();  // units whose output never reached the loss
      s.stage3->end_backward();  // frozen parameters no input gradient released
    }
  }
  if (prints_memory(*this, s.config)) s.telemetry->memory_line("backward", s.global_steps + 1, memory_report());
}

void Engine::step() {
  State& s = *state_;
  const bool boundary = is_gradient_accumulation_boundary();
  ++s.micro_steps;
  if (!boundary) return;
  if (s.boundary_unreduced) {
    throw Error(
        "step() on an accumulation boundary whose backward ran under no_sync: its gradients were never "
        "reduced; run the boundary micro-step's backward outside no_sync",
        "no_sync", s.world.rank());
  }
  ++s.global_steps;
  const bool print = s.config.steps_per_print > 0 && s.global_steps % s.config.steps_per_print == 0;
  {
    auto timed = s.telemetry->time(engine::Phase::kStep);
    apply_step();
  }
  if (print && s.config.memory_breakdown) s.telemetry->memory_line("step", s.global_steps, memory_report());
  engine::StepRecord record;
  record.step = s.global_steps;
  record.samples = global_samples();
  record.applied = s.step_applied;
  record.lr = get_lr();
  record.loss_scale = loss_scale();
  record.grad_norm = s.grad_norm;
  record.skipped_steps = s.skipped_steps;
  record.memory = memory_report();
  record.swap = swap_traffic();
  s.telemetry->end_step(record, print);
}

void Engine::apply_step() {
  State& s = *state_;
  if (s.stage3) {
    s.stage3->verify_order(s.param_names);  // before anything is applied
    s.buckets->forget_secondaries();        // hpZ: they hold the weights being replaced
  }
  // Summed over ranks; on the optimizer's device (the host under ZeRO-Offload: one copy down).
  // (Undefined when they are on NVMe: the partition streams them.)
  // On the host, the step reads them where they are, a slice at a time (Partition::step_from);
  // tensor parallelism and stage 0's experts subtract parts of the sum below from one tensor.
  std::vector<at::Tensor> views;
  if (!s.tensor_parallel && !(s.expert_parallel && !s.flat->layout().partitioned()))
    views = s.buckets->owned_gradient_views();
  const bool by_slices = s.partition->steps_from(views);
  at::Tensor grads;
  if (!by_slices) {
    grads = s.buckets->owned_gradients();
    if (grads.defined()) grads = grads.to(s.partition->state_device());
  }
  const double average = s.buckets->averaging_factor();
  // The local sum of squares of the (still loss-scaled, summed over ranks) gradients, in tiles of
  // sub_group_size elements (DeepSpeed's unit of the step). It is not finite exactly when some
  // gradient is not: the fp16 overflow check reads it too.
  double sum_of_squares = by_slices ? s.partition->sum_of_squares(views) : s.partition->sum_of_squares(grads);
  // Tensor parallelism: the parameters every member holds alike count on the first member only.
  if (s.tensor_parallel && s.tensor_parallel->rank() != 0)
    sum_of_squares -= s.partition->sum_of_squares_of(grads, s.replicated_params);
  if (s.config.fp16.enabled) {
    // Overflow anywhere skips the step everywhere.
    const bool finite = std::isfinite(sum_of_squares);
    at::Tensor overflow = at::full({1}, finite ? 0 : 1, at::kInt);
    s.comm.all_reduce(overflow, ReduceOp::kMax, {.async = false});
    if (s.tensor_parallel) s.tensor_parallel->communicator().all_reduce(overflow, ReduceOp::kMax, {.async = false});
    if (s.pipeline) s.pipeline->communicator().all_reduce(overflow, ReduceOp::kMax, {.async = false});
    if (overflow.item<int>() != 0) {
      s.scaler.update(true);
      ++s.skipped_steps;
      s.step_applied = false;
      s.buckets->zero();
      return;
    }
  }
  // Global L2 norm: partitioned, each rank holds a share of the squares; at stage 0 every rank
  // holds them all — but for the experts, which each expert-parallel rank holds its own of.
  // (Partitioned, the ranks' owned expert shards are every expert once: each expert-data-parallel
  // group holds its own experts.)
  if (s.expert_parallel && !s.flat->layout().partitioned()) {
    const double experts = s.partition->sum_of_squares_of(grads, s.expert_params);
    at::Tensor all_experts = at::full({1}, experts, at::kDouble);
    s.expert_parallel->communicator().all_reduce(all_experts, ReduceOp::kSum, {.async = false});
    sum_of_squares += all_experts.item<double>() - experts;
  }
  at::Tensor squares = at::full({1}, sum_of_squares, at::kDouble);
  if (s.flat->layout().world_size() > 1) s.comm.all_reduce(squares, ReduceOp::kSum, {.async = false});
  if (s.tensor_parallel) s.tensor_parallel->communicator().all_reduce(squares, ReduceOp::kSum, {.async = false});
  if (s.pipeline) s.pipeline->communicator().all_reduce(squares, ReduceOp::kSum, {.async = false});
  const double scaled_norm = std::sqrt(squares.item<double>()) * average;
  s.grad_norm = scaled_norm / loss_scale();
  // Average, unscale and clip in one multiplication (DeepSpeed folds the last two).
  double combined = loss_scale();
  if (s.config.gradient_clipping > 0) {
    const double clip = (s.grad_norm + 1e-6) / s.config.gradient_clipping;
    if (clip > 1) combined *= clip;
  }
  // The factor goes into the optimizer's own pass (no pass of its own over the gradients).
  optim::StepParams params{.lr = s.schedule.lr(),
                           .beta1 = s.config.optimizer.beta1,
                           .beta2 = s.config.optimizer.beta2,
                           .step = s.applied_steps + 1,
                           .grad_scale = average / combined};
  if (auto betas = s.schedule.betas()) std::tie(params.beta1, params.beta2) = *betas;
  {
    auto timed = s.telemetry->time(engine::Phase::kOptimizer);
    if (by_slices) {
      s.partition->step_from(views, params);
    } else {
      s.partition->step(grads, params);
    }
  }
  {
    auto timed = s.telemetry->time(engine::Phase::kOptimizerAllGather);
    s.partition->sync_parameters();
  }
  s.schedule.step();
  s.scaler.update(false);
  s.buckets->zero();
  ++s.applied_steps;
  s.step_applied = true;
}

void Engine::zero_grad() { state_->buckets->zero(); }
void Engine::gather_parameters() {
  if (state_->stage3) state_->buckets->gather_all();
}
void Engine::train() { state_->model->train(true); }
void Engine::eval() { state_->model->eval(); }

Engine::NoSync::NoSync(Engine& engine) : engine_(engine) {
  if (engine_.state_->config.zero.stage >= 2) {
    throw Error("no_sync is incompatible with zero_optimization.stage " +
                    std::to_string(engine_.state_->config.zero.stage) + " (gradients are reduced as they are produced)",
                "no_sync", engine_.state_->world.rank());
  }
  engine_.state_->no_sync = true;
}
Engine::NoSync::~NoSync() { engine_.state_->no_sync = false; }
Engine::NoSync Engine::no_sync() { return NoSync(*this); }

int64_t Engine::global_steps() const { return state_->global_steps; }
int64_t Engine::global_samples() const { return state_->global_steps * state_->config.train_batch_size; }
int64_t Engine::skipped_steps() const { return state_->skipped_steps; }
int64_t Engine::micro_steps() const { return state_->micro_steps; }
bool Engine::was_step_applied() const { return state_->step_applied; }
double Engine::get_lr() const { return state_->schedule.lr(); }
double Engine::get_global_grad_norm() const { return state_->grad_norm; }
double Engine::loss_scale() const { return state_->config.fp16.enabled ? state_->scaler.scale() : 1.0; }
const CommStats& Engine::comm_stats() const { return *state_->stats; }
StepBreakdown Engine::last_step_breakdown() const { return state_->telemetry->last_breakdown(); }
void Engine::set_model_cost(const ModelCost& cost) { state_->telemetry->set_model_cost(cost); }
std::string Engine::comms_summary() const { return state_->telemetry->comms_summary(); }
const Config& Engine::config() const { return state_->config; }
const std::vector<std::string>& Engine::warnings() const { return state_->warnings; }

SwapTraffic Engine::swap_traffic() const {
  const State& s = *state_;
  return {.bytes_read = s.partition->swap_bytes_read() + s.buckets->shard_bytes_read(),
          .bytes_written = s.partition->swap_bytes_written() + s.buckets->shard_bytes_written()};
}

MemoryReport Engine::memory_report() const {
  const State& s = *state_;
  MemoryReport r;
  r.frozen_parameters = s.frozen_bytes;
  for (size_t g = 0; g < s.frozen_buckets.size(); ++g) {
    r.frozen_parameters += s.frozen_flat[g]->bytes() + s.frozen_flat[g]->spare_bytes() + s.frozen_buckets[g]->shard_bytes();
  }
  r.parameters = s.flat->bytes() + s.flat->spare_bytes() + s.buckets->shard_bytes();
  r.gradients = s.buckets->gradient_bytes();
  r.master_weights = s.partition->master_bytes();
  r.optimizer_state = s.partition->state_bytes();
  r.swap_buffers = s.partition->swap_buffer_bytes() + s.buckets->shard_spare_bytes();
  r.on_nvme = s.partition->swap_file_bytes() + s.buckets->shard_file_bytes();
  r.buckets = s.buckets->staging_bytes();
  r.padding_elements = s.flat->layout().padding();
  r.gathered_peak = s.buckets->gathered_peak_bytes();
  r.secondary_partition = s.buckets->secondary_bytes();
  r.gather_buffers = s.flat->spare_bytes();
  const auto& layout_buckets = s.flat->layout().buckets();
  for (int b = 0; b < static_cast<int>(layout_buckets.size()); ++b) {
    if (layout_buckets[static_cast<size_t>(b)].replica_group != 1) continue;  // (group 1: the experts)
    r.experts.parameters += s.flat->bytes_of(b) + s.buckets->bucket(b).shard_bytes();
    r.experts.gradients += s.buckets->gradient_bytes_of(b);
    r.experts.master_weights += s.partition->master_bytes_of(b);
    r.experts.optimizer_state += s.partition->state_bytes_of(b);
  }
  return r;
}

}  // namespace zero
