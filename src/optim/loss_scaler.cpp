#include "zero/loss_scaler.h"

#include <algorithm>
#include <cmath>

namespace zero {

LossScaler::LossScaler(const Fp16Config& config)
    : config_(config),
      dynamic_(config.loss_scale == 0),
      scale_(dynamic_ ? std::ldexp(1.0, config.initial_scale_power) : config.loss_scale),
      hysteresis_left_(config.hysteresis) {}

void LossScaler::update(bool overflow) {
  if (!dynamic_) return;
  if (overflow) {
    if (config_.hysteresis == 1 || hysteresis_left_ == 1) {
      scale_ = std::max(scale_ / 2.0, config_.min_loss_scale);
    } else {
      --hysteresis_left_;
    }
    last_overflow_iteration_ = iteration_;
  } else {
    if (config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
    if ((iteration_ - last_overflow_iteration_) % config_.loss_scale_window == 0) {
      if (!config_.consecutive_hysteresis) hysteresis_left_ = config_.hysteresis;
      scale_ *= 2.0;
    }
  }
  ++iteration_;
}

void LossScaler::restore(double scale, int64_t iteration, int64_t last_overflow_iteration, int hysteresis_left) {
  scale_ = scale;
  iteration_ = iteration;
  last_overflow_iteration_ = last_overflow_iteration;
  hysteresis_left_ = hysteresis_left;
}

}  // namespace zero
