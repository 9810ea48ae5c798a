// zero::LrSchedule — DeepSpeed's learning-rate schedules (WarmupLR, WarmupDecayLR,
// WarmupCosineLR, OneCycle with momentum cycling, LRRangeTest), with DeepSpeed's formulas and its
// stepping convention (and the Hugging Face Trainer's linear, cosine, constant and
// constant_with_warmup, which run at base × factor(k) on the step after k applied steps, so a
// warmup's first step runs at lr 0, as the Trainer's does):
//
//   - the schedule starts at last_batch_iteration = -1 and step() is called after every applied
//     optimizer step (never after a skipped fp16 step);
//   - WarmupLR, WarmupDecayLR and WarmupCosineLR do not touch the optimizer at construction, so the
//     first optimizer step runs at the optimizer's own lr (optimizer.params.lr), and the warmup
//     formula applies from the second step on; OneCycle and LRRangeTest set their minimum lr at
//     construction. zerocpp reproduces this so that a DeepSpeed run's trajectory carries over.
//
// Torch-free.
#pragma once

#include <cstdint>
#include <optional>

#include "zero/config.h"

namespace zero {

class LrSchedule {
 public:
  // `optimizer` gives the base lr and betas (what the optimizer starts with).
  LrSchedule(const SchedulerConfig& schedule, const OptimizerConfig& optimizer);

  // The lr for the next optimizer step.
  double lr() const { return lr_; }
  // The optimizer's (beta1, beta2) for the next step when OneCycle cycles momentum; else empty.
  std::optional<std::pair<double, double>> betas() const { return betas_; }
  // After an applied optimizer step.
  void step();

  int64_t last_batch_iteration() const { return last_batch_iteration_; }
  // For checkpoints: puts the schedule where step() would have after `iteration`.
  void set_last_batch_iteration(int64_t iteration);

  // The pure formulas, for tests: DeepSpeed's get_lr() / momentum at a given last_batch_iteration.
  double lr_at(int64_t last_batch_iteration) const;
  std::optional<std::pair<double, double>> betas_at(int64_t last_batch_iteration) const;

 private:
  bool is_trainer_schedule() const;
  double trainer_factor(int64_t steps_taken) const;
  double warmup_fraction(int64_t iteration) const;  // the 0..1 warmup "gamma"
  double one_cycle_scale(int64_t iteration) const;

  SchedulerConfig config_;
  double base_lr_;
  bool cycles_momentum_ = false;
  int64_t warmup_steps_ = 2;  // DeepSpeed clamps warmup_num_steps to >= 2
  int64_t last_batch_iteration_ = -1;
  double lr_;
  std::optional<std::pair<double, double>> betas_;
};

}  // namespace zero
