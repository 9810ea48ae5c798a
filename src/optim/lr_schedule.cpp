#include "zero/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace zero {

LrSchedule::LrSchedule(const SchedulerConfig& schedule, const OptimizerConfig& optimizer)
    : config_(schedule), base_lr_(optimizer.lr), lr_(optimizer.lr) {
  warmup_steps_ = std::max<int64_t>(2, config_.warmup_num_steps);
  // Note: DeepSpeed cycles momentum only for optimizers with betas, and sets beta2 to 0.99 while
  // doing so (its OneCycle hard-codes it).
  cycles_momentum_ = config_.type == SchedulerType::kOneCycle && config_.cycle_momentum &&
                     optimizer.type != OptimizerType::kSgd && optimizer.type != OptimizerType::kAdagrad &&
                     optimizer.type != OptimizerType::kNone;
  set_last_batch_iteration(-1);
}

double LrSchedule::warmup_fraction(int64_t t) const {
  if (config_.warmup_type == "linear") return static_cast<double>(t) / static_cast<double>(warmup_steps_);
  return std::log(static_cast<double>(t + 1)) / std::log(static_cast<double>(warmup_steps_));
}

double LrSchedule::one_cycle_scale(int64_t t) const {
  const double first = static_cast<double>(config_.cycle_first_step_size);
  const double total = first + static_cast<double>(config_.cycle_second_step_size);
  const double ratio = first / total;
  const double iteration = static_cast<double>(t + 1);
  const double cycle = std::floor(1.0 + iteration / total);
  const double x = 1.0 + iteration / total - cycle;
  return x <= ratio ? x / ratio : (x - 1.0) / (ratio - 1.0);
}

bool LrSchedule::is_trainer_schedule() const {
  return config_.type == SchedulerType::kTrainerLinear || config_.type == SchedulerType::kTrainerCosine ||
         config_.type == SchedulerType::kTrainerConstant || config_.type == SchedulerType::kTrainerConstantWithWarmup;
}

// transformers' get_scheduler lambdas (optimization.py), as a factor of the base lr at `step`
// scheduler steps taken: a linear warmup from 0, then the type's decay.
double LrSchedule::trainer_factor(int64_t step) const {
  const double s = static_cast<double>(step), warmup = static_cast<double>(config_.warmup_num_steps);
  const double total = static_cast<double>(config_.total_num_steps);
  if (config_.type == SchedulerType::kTrainerConstant) return 1.0;
  if (step < config_.warmup_num_steps) return s / std::max(1.0, warmup);
  switch (config_.type) {
    case SchedulerType::kTrainerLinear:
      return std::max(0.0, (total - s) / std::max(1.0, total - warmup));
    case SchedulerType::kTrainerCosine: {
      const double progress = (s - warmup) / std::max(1.0, total - warmup);
      return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress)));  // num_cycles 0.5
    }
    default:
      return 1.0;
  }
}

double LrSchedule::lr_at(int64_t t) const {
  // The Trainer's LambdaLR sets base × factor(0) at construction and factor(k) after k steps.
  if (is_trainer_schedule()) return base_lr_ * trainer_factor(t + 1);
  if (t < 0) {  // before the first step()
    if (config_.type == SchedulerType::kOneCycle) return config_.cycle_min_lr;
    if (config_.type == SchedulerType::kLRRangeTest) return config_.lr_range_test_min_lr;
    return base_lr_;
  }
  const double min_lr = config_.warmup_min_lr, delta = config_.warmup_max_lr - config_.warmup_min_lr;
  switch (config_.type) {
    case SchedulerType::kNone:
    case SchedulerType::kTrainerLinear:
    case SchedulerType::kTrainerCosine:
    case SchedulerType::kTrainerConstant:
    case SchedulerType::kTrainerConstantWithWarmup:
      return base_lr_;
    case SchedulerType::kWarmupLR:
      return min_lr + delta * (t < warmup_steps_ ? warmup_fraction(t) : 1.0);
    case SchedulerType::kWarmupDecayLR: {
      if (t < warmup_steps_) return min_lr + delta * warmup_fraction(t);
      const double total = static_cast<double>(config_.total_num_steps);
      const double gamma = (total - static_cast<double>(t)) / std::max(1.0, total - static_cast<double>(warmup_steps_));
      return min_lr + delta * std::max(0.0, gamma);
    }
    case SchedulerType::kWarmupCosineLR: {
      if (t < warmup_steps_) {
        return base_lr_ * (config_.warmup_min_ratio + warmup_fraction(t) * (1.0 - config_.warmup_min_ratio));
      }
      const double step = static_cast<double>(t - warmup_steps_ + 1);
      const double span = static_cast<double>(config_.total_num_steps - warmup_steps_);
      const double cosine = (1.0 + std::cos(M_PI * step / span)) / 2.0;
      return base_lr_ * std::max(0.0, config_.cos_min_ratio + (1.0 - config_.cos_min_ratio) * cosine);
    }
    case SchedulerType::kOneCycle: {
      const double total = static_cast<double>(config_.cycle_first_step_size + config_.cycle_second_step_size);
      if (static_cast<double>(t) < total) {
        return config_.cycle_min_lr + (config_.cycle_max_lr - config_.cycle_min_lr) * one_cycle_scale(t);
      }
      if (config_.decay_step_size == 0 || config_.decay_lr_rate == 0) return config_.cycle_min_lr;
      const double interval = (static_cast<double>(t) - total + 1.0) / static_cast<double>(config_.decay_step_size);
      return config_.cycle_min_lr / (1.0 + config_.decay_lr_rate * interval);
    }
    case SchedulerType::kLRRangeTest: {
      double interval = static_cast<double>(t + 1) / static_cast<double>(config_.lr_range_test_step_size);
      if (config_.lr_range_test_staircase) interval = std::floor(interval);
      return config_.lr_range_test_min_lr * (1.0 + config_.lr_range_test_step_rate * interval);
    }
  }
  return base_lr_;
}

std::optional<std::pair<double, double>> LrSchedule::betas_at(int64_t t) const {
  if (!cycles_momentum_) return std::nullopt;
  if (t < 0) return std::make_pair(config_.cycle_min_mom, 0.99);
  const double total = static_cast<double>(config_.cycle_first_step_size + config_.cycle_second_step_size);
  if (static_cast<double>(t) < total) {
    return std::make_pair(config_.cycle_max_mom - (config_.cycle_max_mom - config_.cycle_min_mom) * one_cycle_scale(t),
                          0.99);
  }
  if (config_.decay_step_size == 0 || config_.decay_mom_rate == 0) return std::make_pair(config_.cycle_max_mom, 0.99);
  const double interval = (static_cast<double>(t) - total + 1.0) / static_cast<double>(config_.decay_step_size);
  return std::make_pair(config_.cycle_max_mom * (1.0 + config_.decay_mom_rate * interval), 0.99);
}

void LrSchedule::step() { set_last_batch_iteration(last_batch_iteration_ + 1); }

void LrSchedule::set_last_batch_iteration(int64_t iteration) {
  last_batch_iteration_ = iteration;
  lr_ = lr_at(iteration);
  betas_ = betas_at(iteration);
}

}  // namespace zero
