// zero::LossScaler — fp16 loss scaling as DeepSpeed does it (docs/config.md, fp16 block).
//
// Dynamic: starts at 2^initial_scale_power. On an overflow the step is skipped; if hysteresis is
// used up the scale halves (never below min_loss_scale), else hysteresis decrements. After
// loss_scale_window steps since the last overflow the scale doubles (and hysteresis refills;
// with consecutive_hysteresis it refills on every good step). Static (loss_scale > 0): constant.
// Torch-free: callers decide "overflow" (agreed across ranks) and pass it in.
#pragma once

#include <cstdint>

#include "zero/config.h"

namespace zero {

class LossScaler {
 public:
  explicit LossScaler(const Fp16Config& config);

  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  // After each optimizer step attempt, with whether any rank saw inf/nan in the gradients.
  void update(bool overflow);

  // State, for checkpoints and tests.
  int64_t iteration() const { return iteration_; }
  int64_t last_overflow_iteration() const { return last_overflow_iteration_; }
  int hysteresis_left() const { return hysteresis_left_; }
  void restore(double scale, int64_t iteration, int64_t last_overflow_iteration, int hysteresis_left);

 private:
  Fp16Config config_;
  bool dynamic_;
  double scale_;
  int64_t iteration_ = 0;
  int64_t last_overflow_iteration_ = -1;
  int hysteresis_left_;
};

}  // namespace zero
