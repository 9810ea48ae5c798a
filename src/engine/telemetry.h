// Telemetry — what the operator of a training job sees (docs/observability.md): the engine's
// phase timers (wall_clock_breakdown) and their min/max/mean over ranks every steps_per_print
// steps, the comms logger, memory around forward, backward and step (memory_breakdown), the
// flops profiler, and each optimizer step handed to the sinks (CSV/TensorBoard monitors on rank 0,
// the Prometheus endpoint on every rank). The timers always run (a clock read per phase); the
// rest costs nothing unless the config enables it.
#pragma once

#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm/comms_logger.h"
#include "zero/comm_stats.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/world.h"

namespace zero::engine {

enum class Phase { kForward, kBackward, kBackwardInner, kBackwardReduce, kStep, kOptimizer, kOptimizerAllGather };
inline constexpr int kPhases = 7;

// One optimizer step, as the sinks receive it.
struct StepRecord {
  int64_t step = 0, samples = 0;  // global steps and samples after it
  bool applied = true;            // false: skipped (fp16 overflow)
  double loss = 0;                // this rank's mean micro-step loss (NaN when not recorded)
  double lr = 0, loss_scale = 1, grad_norm = 0;
  int64_t skipped_steps = 0;
  StepBreakdown breakdown;
  double samples_per_second = 0, tokens_per_second = 0;
  double flops_per_second = 0;  // this rank's model FLOP/s (Engine::set_model_cost), 0 unknown
  MemoryReport memory;
  int64_t allocator_live = 0, allocator_peak = 0, rss = 0;  // bytes
  SwapTraffic swap;
  std::array<double, 6> bus_bytes{};  // sent per collective op since the start (CollectiveOp order)
  std::array<double, 6> tensor_parallel_bus_bytes{};  // the same in the layers' tensor-parallel collectives
  // Mixtures of experts: the step's tokens per expert from this rank (per MoE layer), and what
  // the expert-parallel exchange sent since the start.
  std::vector<ExpertStep::Layer> expert_load;
  double expert_all_to_all_bus_bytes = 0;
};

class StepSink {
 public:
  virtual ~StepSink() = default;
  virtual void on_step(const StepRecord& record) = 0;
  // Every completed collective of the engine (called on the training thread).
  virtual void on_collective(const CollectiveRecord& record) {}
  // The watchdog's view: how long the current collective has waited (from its thread).
  virtual void on_wait(double seconds) {}
};

class Telemetry {
 public:
  // `layers`: the tensor-parallel group's collectives made by the model's layers (null: none), for
  // the comms logger and the sinks beside the engine's own (`stats`, over `world`).
  Telemetry(const Config& config, World& world, CommStats& stats, const ModelParallelOptions& layers = {});
  ~Telemetry();  // rank 0 prints the comms summary

  // Times a phase while it lives (and names it for the comms logger's debug rows).
  class Scope {
   public:
    Scope(Telemetry& t, Phase p);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Telemetry& t_;
    Phase phase_;
    const char* previous_;
    std::chrono::steady_clock::time_point start_;
  };
  Scope time(Phase p) { return Scope(*this, p); }

  bool wants_loss() const { return wants_loss_; }
  void record_loss(double loss);
  // memory_breakdown: a line after forward, backward or step ("forward", ...) on print steps.
  void memory_line(const char* after, int64_t step, const MemoryReport& report);
  // On every accumulation boundary, after the step (applied or skipped). `print`: a print step,
  // where every rank takes part in the timers' min/max/mean (collective).
  void end_step(StepRecord record, bool print);

  void set_model_cost(const ModelCost& cost) { cost_ = cost; }
  const ModelCost& model_cost() const { return cost_; }
  StepBreakdown last_breakdown() const { return last_; }
  std::string comms_summary() const;
  void on_wait(double seconds);

 private:
  // The step's timers; `experts` gets what the model's MoE layers did (ExpertStep).
  StepBreakdown collect(double wall, ExpertStep& experts);
  void print_breakdown(int64_t step);
  void profile_flops(const StepRecord& record);

  const Config& config_;
  World& world_;
  CommStats& stats_;
  std::unique_ptr<CommsLogger> comms_;
  CommStats* layer_stats_ = nullptr;
  CommStats* expert_stats_ = nullptr;             // expert parallelism's exchange
  double expert_all_to_all_before_ = 0;           // its all-to-all seconds at the last step
  std::function<ExpertStep()> expert_step_;       // the MoE layers' account (null: no experts)
  std::unique_ptr<CommsLogger> expert_comms_;
  std::unique_ptr<CommsLogger> layer_comms_;
  std::vector<std::unique_ptr<StepSink>> sinks_;
  std::array<double, kPhases> phase_seconds_{};
  const char* phase_name_ = "other";
  bool wants_loss_ = false;
  double loss_sum_ = 0;
  int64_t losses_ = 0;
  StepBreakdown last_;
  std::vector<StepBreakdown> window_;  // since the last print
  std::array<double, 6> comm_seconds_before_{};
  double swap_in_before_ = 0, swap_out_before_ = 0;
  std::chrono::steady_clock::time_point last_step_end_;
  bool started_ = false;
  int64_t steps_seen_ = 0;
  ModelCost cost_;
  double peak_flops_ = 0;  // per rank, for MFU
};

// The sinks the config asks for (telemetry_sinks.cpp): monitors on rank 0, the metrics endpoint
// (with the tensor-parallel group's series when `tensor_parallel`; with the MoE layers' when `experts`).
// With `experts`, the MoE series too.
std::vector<std::unique_ptr<StepSink>> make_sinks(const Config& config, World& world, bool tensor_parallel,
                                                  bool experts);

}  // namespace zero::engine
