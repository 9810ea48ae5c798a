#include "engine/telemetry.h"

#include <ATen/ATen.h>
#include <fmt/core.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "offload/swap_file.h"
#include "zero/error.h"
#include "zero/memory_tracker.h"

namespace zero::engine {
namespace {

using Clock = std::chrono::steady_clock;

constexpr CollectiveOp kOps[] = {CollectiveOp::kAllReduce, CollectiveOp::kReduceScatter, CollectiveOp::kAllGather,
                                 CollectiveOp::kBroadcast, CollectiveOp::kAllToAll,      CollectiveOp::kBarrier};

const char* phase_name(Phase p) {
  static const char* kNames[] = {"forward", "backward", "backward_inner", "backward_reduce",
                                 "step",    "optimizer", "optimizer_allgather"};
  return kNames[static_cast<int>(p)];
}

// The breakdown's fields with DeepSpeed's timer names first; the rest are zerocpp's.
struct Field {
  const char* name;
  double StepBreakdown::*member;
  bool always;  // printed even when zero on every rank
};
constexpr Field kFields[] = {
    {"fwd", &StepBreakdown::forward, true},
    {"bwd", &StepBreakdown::backward, true},
    {"bwd_inner", &StepBreakdown::backward_inner, true},
    {"bwd_allreduce", &StepBreakdown::backward_reduce, true},
    {"step", &StepBreakdown::step, true},
    {"optimizer_step", &StepBreakdown::optimizer, true},
    {"optimizer_allgather", &StepBreakdown::optimizer_allgather, true},
    {"all_reduce", &StepBreakdown::all_reduce, false},
    {"reduce_scatter", &StepBreakdown::reduce_scatter, false},
    {"all_gather", &StepBreakdown::all_gather, false},
    {"swap_in", &StepBreakdown::swap_in, false},
    {"swap_out", &StepBreakdown::swap_out, false},
    {"moe_router", &StepBreakdown::moe_router, false},
    {"moe_dispatch", &StepBreakdown::moe_dispatch, false},
    {"moe_experts", &StepBreakdown::moe_experts, false},
    {"moe_combine", &StepBreakdown::moe_combine, false},
    {"expert_all_to_all", &StepBreakdown::expert_all_to_all, false},
    {"total", &StepBreakdown::wall, true},
};
constexpr int kFieldCount = static_cast<int>(std::size(kFields));

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// One rank's fp32 GEMM rate with the engine's threads: the MFU denominator when the config
// gives no peak_tflops (a 1024² matmul, best of three after a warm-up).
double measured_peak_flops() {
  const int64_t n = 1024;
  at::Tensor a = at::randn({n, n}), b = at::randn({n, n}), c = at::empty({n, n});
  at::mm_out(c, a, b);
  double best = std::numeric_limits<double>::max();
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    at::mm_out(c, a, b);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return 2.0 * n * n * n / best;
}

}  // namespace

Telemetry::Telemetry(const Config& config, World& world, CommStats& stats, const ModelParallelOptions& layers)
    : config_(config),
      world_(world),
      stats_(stats),
      expert_step_(layers.expert_step),
      sinks_(make_sinks(config, world, layers.group && layers.group->size() > 1 && layers.layer_stats,
                        static_cast<bool>(layers.expert_step))) {
  const bool split = layers.group && layers.group->size() > 1 && layers.layer_stats;
  if (config.comms_logger.enabled) {
    auto scope = [](const World& w) { return w.num_nodes() > 1 ? "inter-node" : "intra-node"; };
    comms_ = std::make_unique<CommsLogger>(config.comms_logger, world.size(), scope(world),
                                           world.process_rank() == 0 ? stdout : nullptr, split ? "data-parallel" : "");
    if (split) {
      layer_comms_ = std::make_unique<CommsLogger>(config.comms_logger, layers.group->size(), scope(*layers.group),
                                                   world.process_rank() == 0 ? stdout : nullptr, "tensor-parallel");
    }
  }
  if (split) {
    layer_stats_ = layers.layer_stats;
    if (layer_comms_) layer_stats_->set_listener([this](const CollectiveRecord& r) { layer_comms_->record(r, phase_name_); });
  }
  if (layers.expert_stats && layers.expert_parallel && layers.expert_parallel->size() > 1) {
    expert_stats_ = layers.expert_stats;
    if (config.comms_logger.enabled) {
      auto scope = [](const World& w) { return w.num_nodes() > 1 ? "inter-node" : "intra-node"; };
      expert_comms_ = std::make_unique<CommsLogger>(config.comms_logger, layers.expert_parallel->size(),
                                                    scope(*layers.expert_parallel),
                                                    world.process_rank() == 0 ? stdout : nullptr, "expert-parallel");
      expert_stats_->set_listener([this](const CollectiveRecord& r) { expert_comms_->record(r, phase_name_); });
    }
  }
  wants_loss_ = !sinks_.empty();
  if (comms_ || !sinks_.empty()) {
    stats_.set_listener([this](const CollectiveRecord& r) {
      if (comms_) comms_->record(r, phase_name_);
      for (auto& sink : sinks_) sink->on_collective(r);
    });
  }
  if (config.memory_breakdown || config.prometheus.enabled) MemoryTracker::install();
  if (config.flops_profiler.enabled) {
    const std::string& file = config.flops_profiler.output_file;
    if (!file.empty() && world.rank() == 0 && !std::ofstream(file, std::ios::app)) {
      throw Error("flops_profiler.output_file: cannot write " + file, "flops_profiler.output_file", world.rank());
    }
    peak_flops_ = config.flops_profiler.peak_tflops > 0 ? config.flops_profiler.peak_tflops * 1e12 : measured_peak_flops();
  }
  for (int i = 0; i < 6; ++i) comm_seconds_before_[static_cast<size_t>(i)] = stats_.total(kOps[i]).seconds;
  const offload::IoWaitSeconds io = offload::io_wait_seconds();
  swap_in_before_ = io.read;
  swap_out_before_ = io.write;
}

Telemetry::~Telemetry() {
  stats_.set_listener(nullptr);
  if (layer_stats_) layer_stats_->set_listener(nullptr);
  if (expert_stats_) expert_stats_->set_listener(nullptr);
  if (comms_ && world_.process_rank() == 0) {
    fmt::print("{}", comms_summary());
    std::fflush(stdout);
  }
}

Telemetry::Scope::Scope(Telemetry& t, Phase p) : t_(t), phase_(p), previous_(t.phase_name_), start_(Clock::now()) {
  if (!t_.started_) {
    t_.started_ = true;
    t_.last_step_end_ = start_;
  }
  t_.phase_name_ = phase_name(p);
}

Telemetry::Scope::~Scope() {
  t_.phase_seconds_[static_cast<size_t>(phase_)] += std::chrono::duration<double>(Clock::now() - start_).count();
  t_.phase_name_ = previous_;
}

void Telemetry::record_loss(double loss) {
  loss_sum_ += loss;
  ++losses_;
}

StepBreakdown Telemetry::collect(double wall, ExpertStep& experts) {
  StepBreakdown b;
  if (expert_step_) {
    experts = expert_step_();
    b.moe_router = experts.router;
    b.moe_dispatch = experts.dispatch;
    b.moe_experts = experts.experts;
    b.moe_combine = experts.combine;
  }
  if (expert_stats_) {
    const double now = expert_stats_->total(CollectiveOp::kAllToAll).seconds;
    b.expert_all_to_all = now - expert_all_to_all_before_;
    expert_all_to_all_before_ = now;
  }
  auto phase = [&](Phase p) { return phase_seconds_[static_cast<size_t>(p)]; };
  b.forward = phase(Phase::kForward);
  b.backward = phase(Phase::kBackward);
  b.backward_inner = phase(Phase::kBackwardInner);
  b.backward_reduce = phase(Phase::kBackwardReduce);
  b.step = phase(Phase::kStep);
  b.optimizer = phase(Phase::kOptimizer);
  b.optimizer_allgather = phase(Phase::kOptimizerAllGather);
  phase_seconds_.fill(0);
  auto delta = [&](CollectiveOp op) {
    const double now = stats_.total(op).seconds;
    double& before = comm_seconds_before_[static_cast<size_t>(op)];
    const double d = now - before;
    before = now;
    return d;
  };
  b.all_reduce = delta(CollectiveOp::kAllReduce);
  b.reduce_scatter = delta(CollectiveOp::kReduceScatter);
  b.all_gather = delta(CollectiveOp::kAllGather);
  const offload::IoWaitSeconds io = offload::io_wait_seconds();
  b.swap_in = io.read - swap_in_before_;
  b.swap_out = io.write - swap_out_before_;
  swap_in_before_ = io.read;
  swap_out_before_ = io.write;
  b.wall = wall;
  return b;
}

void Telemetry::end_step(StepRecord record, bool print) {
  const auto now = Clock::now();
  ExpertStep experts;
  last_ = collect(started_ ? std::chrono::duration<double>(now - last_step_end_).count() : 0.0, experts);
  record.expert_load = std::move(experts.load);
  last_step_end_ = now;
  started_ = true;
  ++steps_seen_;
  record.breakdown = last_;
  record.loss = losses_ > 0 ? loss_sum_ / static_cast<double>(losses_) : std::nan("");
  loss_sum_ = 0;
  losses_ = 0;
  if (last_.wall > 0) {
    record.samples_per_second = static_cast<double>(config_.train_batch_size) / last_.wall;
    record.tokens_per_second = record.samples_per_second * static_cast<double>(cost_.tokens_per_sample);
    record.flops_per_second = record.samples_per_second * cost_.flops_per_sample / world_.size();
  }
  if (config_.memory_breakdown || config_.prometheus.enabled) {
    MemoryTracker& tracker = MemoryTracker::install();
    record.allocator_live = tracker.current();
    record.allocator_peak = tracker.peak();
    record.rss = resident_bytes();
  }
  for (int i = 0; i < 6; ++i) record.bus_bytes[static_cast<size_t>(i)] = stats_.total(kOps[i]).bus_bytes;
  if (layer_stats_) {
    for (int i = 0; i < 6; ++i)
      record.tensor_parallel_bus_bytes[static_cast<size_t>(i)] = layer_stats_->total(kOps[i]).bus_bytes;
  }
  if (expert_stats_) record.expert_all_to_all_bus_bytes = expert_stats_->total(CollectiveOp::kAllToAll).bus_bytes;
  for (auto& sink : sinks_) sink->on_step(record);
  window_.push_back(last_);
  if (print && config_.wall_clock_breakdown) print_breakdown(record.step);
  if (print) window_.clear();
  if (config_.flops_profiler.enabled && record.step == config_.flops_profiler.profile_step) profile_flops(record);
}

void Telemetry::print_breakdown(int64_t step) {
  // Mean per step over the window on this rank, then every rank's means side by side (through
  // the world's own communicator: not counted as the engine's traffic).
  std::vector<double> mine(kFieldCount, 0.0);
  for (const StepBreakdown& b : window_)
    for (int f = 0; f < kFieldCount; ++f) mine[static_cast<size_t>(f)] += b.*kFields[f].member;
  for (double& v : mine) v /= static_cast<double>(std::max<size_t>(1, window_.size()));
  const int n = world_.size();
  at::Tensor all = at::empty({n * kFieldCount}, at::kDouble);
  world_.communicator().all_gather(at::tensor(mine, at::kDouble), all, {.async = false});
  if (world_.process_rank() != 0) return;  // (under tensor parallelism, once: not per data-parallel group)
  const double* v = all.data_ptr<double>();
  std::string line = fmt::format("[Rank 0] step {}: time (ms) per step over the last {} steps, mean/min/max over {} rank{}",
                                 step, window_.size(), n, n == 1 ? "" : "s");
  for (int f = 0; f < kFieldCount; ++f) {
    double sum = 0, lo = std::numeric_limits<double>::max(), hi = 0;
    for (int r = 0; r < n; ++r) {
      const double x = v[r * kFieldCount + f];
      sum += x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    if (!kFields[f].always && hi == 0) continue;
    line += fmt::format(" | {}: {:.2f}/{:.2f}/{:.2f}", kFields[f].name, sum / n * 1e3, lo * 1e3, hi * 1e3);
  }
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

void Telemetry::memory_line(const char* after, int64_t step, const MemoryReport& r) {
  if (world_.process_rank() != 0) return;  // (under tensor parallelism, once: not per data-parallel group)
  MemoryTracker& tracker = MemoryTracker::install();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const int64_t rss = resident_bytes();
  auto mb = [](int64_t bytes) { return static_cast<double>(bytes) / 1048576.0; };
  fmt::print(
      "[Rank 0] memory after {} (step {}) | model state MB: parameters {:.2f}, gradients {:.2f}, master {:.2f}, "
      "optimizer {:.2f}, buckets {:.2f}, swap buffers {:.2f} | allocator MB: live {:.2f}, peak {:.2f} | RSS MB: {:.2f}, "
      "peak {:.2f}\n",
      after, step, mb(r.parameters), mb(r.gradients), mb(r.master_weights), mb(r.optimizer_state), mb(r.buckets),
      mb(r.swap_buffers), mb(tracker.current()), mb(tracker.peak()), mb(rss),
      // The kernel's high-water mark lags the current RSS until it next updates it.
      std::max(mb(rss), static_cast<double>(usage.ru_maxrss) / 1024.0));
  std::fflush(stdout);
}

void Telemetry::profile_flops(const StepRecord& record) {
  if (world_.process_rank() != 0) return;  // (under tensor parallelism, once: not per data-parallel group)
  const double wall = record.breakdown.wall;
  std::string text;
  if (cost_.flops_per_sample <= 0 || wall <= 0) {
    text = fmt::format("[Rank 0] flops profiler, step {}: the model gave no FLOPs per sample (Engine::set_model_cost)\n",
                       record.step);
  } else {
    const double per_step = cost_.flops_per_sample * static_cast<double>(config_.train_batch_size);
    const double per_rank = per_step / world_.size() / wall;
    text = fmt::format(
        "[Rank 0] flops profiler, step {}: {:.4g} model FLOPs per step ({:.4g} per sample, forward and backward) in "
        "{:.3f} s: {:.4g} FLOP/s per rank; peak {:.4g} FLOP/s per rank ({}): MFU {:.1f}%\n",
        record.step, per_step, cost_.flops_per_sample, wall, per_rank, peak_flops_,
        config_.flops_profiler.peak_tflops > 0 ? "flops_profiler.peak_tflops" : "measured: 1024x1024 fp32 GEMM",
        100.0 * per_rank / peak_flops_);
  }
  if (config_.flops_profiler.output_file.empty()) {
    fmt::print("{}", text);
    std::fflush(stdout);
  } else {
    std::ofstream out(config_.flops_profiler.output_file, std::ios::app);
    out << text;
    if (!out) std::fprintf(stderr, "zerocpp: warning: flops profiler: could not write %s\n", config_.flops_profiler.output_file.c_str());
  }
}

std::string Telemetry::comms_summary() const {
  if (!comms_) return "";
  return comms_->summary(steps_seen_) + (layer_comms_ ? layer_comms_->summary(steps_seen_) : std::string()) +
         (expert_comms_ ? expert_comms_->summary(steps_seen_) : std::string());
}

void Telemetry::on_wait(double seconds) {
  for (auto& sink : sinks_) sink->on_wait(seconds);
}

}  // namespace zero::engine
