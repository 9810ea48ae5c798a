// Each LR schedule against DeepSpeed's formulas at chosen steps (expected values worked out by hand
// from deepspeed/runtime/lr_schedules.py; the log ones with a calculator).
#include "zero/lr_schedule.h"

#include <gtest/gtest.h>

using namespace zero;

namespace {

OptimizerConfig adam(double lr) {
  OptimizerConfig o;
  o.type = OptimizerType::kAdamW;
  o.lr = lr;
  return o;
}

SchedulerConfig warmup(SchedulerType type, const char* warmup_type) {
  SchedulerConfig s;
  s.type = type;
  s.warmup_min_lr = 1e-4;
  s.warmup_max_lr = 1e-3;
  s.warmup_num_steps = 10;
  s.warmup_type = warmup_type;
  return s;
}

}  // namespace

TEST(LrSchedule, WarmupLRLog) {
  LrSchedule s(warmup(SchedulerType::kWarmupLR, "log"), adam(0.01));
  EXPECT_DOUBLE_EQ(s.lr(), 0.01);  // DeepSpeed: the first step runs at the optimizer's own lr
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 0.0007290730039024168);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 1e-3);
  EXPECT_DOUBLE_EQ(s.lr_at(500), 1e-3);
  s.step();
  EXPECT_DOUBLE_EQ(s.lr(), 1e-4);
  EXPECT_EQ(s.last_batch_iteration(), 0);
  EXPECT_FALSE(s.betas().has_value());
}

TEST(LrSchedule, WarmupLRLinearAndTinyWarmup) {
  LrSchedule s(warmup(SchedulerType::kWarmupLR, "linear"), adam(0.01));
  EXPECT_DOUBLE_EQ(s.lr_at(4), 1e-4 + 9e-4 * 0.4);
  SchedulerConfig one = warmup(SchedulerType::kWarmupLR, "linear");
  one.warmup_num_steps = 1;  // DeepSpeed clamps it to 2
  LrSchedule clamped(one, adam(0.01));
  EXPECT_DOUBLE_EQ(clamped.lr_at(1), 1e-4 + 9e-4 * 0.5);
  EXPECT_DOUBLE_EQ(clamped.lr_at(2), 1e-3);
}

TEST(LrSchedule, WarmupDecayLR) {
  SchedulerConfig c = warmup(SchedulerType::kWarmupDecayLR, "linear");
  c.warmup_min_lr = 0;
  c.total_num_steps = 20;
  LrSchedule s(c, adam(0.01));
  EXPECT_DOUBLE_EQ(s.lr_at(5), 5e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1e-3);
  EXPECT_DOUBLE_EQ(s.lr_at(15), 5e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(20), 0.0);
  EXPECT_DOUBLE_EQ(s.lr_at(25), 0.0);
}

TEST(LrSchedule, WarmupCosineLR) {
  SchedulerConfig c;
  c.type = SchedulerType::kWarmupCosineLR;
  c.total_num_steps = 20;
  c.warmup_num_steps = 5;
  c.warmup_min_ratio = 0.1;
  c.cos_min_ratio = 0.01;
  c.warmup_type = "linear";
  LrSchedule s(c, adam(1e-3));
  EXPECT_DOUBLE_EQ(s.lr(), 1e-3);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(2), 0.00046000000000000007);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 0.0009891830623632338);
  EXPECT_NEAR(s.lr_at(19), 1e-5, 1e-18);
  c.warmup_type = "log";
  EXPECT_DOUBLE_EQ(LrSchedule(c, adam(1e-3)).lr_at(2), 0.0007143455750373869);
}

TEST(LrSchedule, OneCycleWithMomentum) {
  SchedulerConfig c;
  c.type = SchedulerType::kOneCycle;
  c.cycle_min_lr = 1e-4;
  c.cycle_max_lr = 1e-3;
  c.cycle_first_step_size = 4;
  c.cycle_second_step_size = 6;
  c.decay_step_size = 2;
  c.decay_lr_rate = 0.5;
  c.cycle_min_mom = 0.85;
  c.cycle_max_mom = 0.95;
  c.decay_mom_rate = 0.1;
  LrSchedule s(c, adam(0.5));
  EXPECT_DOUBLE_EQ(s.lr(), 1e-4);  // set at construction
  ASSERT_TRUE(s.betas().has_value());
  EXPECT_DOUBLE_EQ(s.betas()->first, 0.85);
  EXPECT_DOUBLE_EQ(s.betas()->second, 0.99);
  EXPECT_DOUBLE_EQ(s.lr_at(1), 5.5e-4);
  EXPECT_DOUBLE_EQ(s.betas_at(1)->first, 0.90);
  EXPECT_DOUBLE_EQ(s.lr_at(3), 1e-3);
  EXPECT_DOUBLE_EQ(s.betas_at(3)->first, 0.85);
  EXPECT_DOUBLE_EQ(s.lr_at(6), 5.5e-4);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 1e-4);
  EXPECT_DOUBLE_EQ(s.betas_at(9)->first, 0.95);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 8e-5);  // decay: 1e-4 / (1 + 0.5 * 0.5)
  EXPECT_DOUBLE_EQ(s.betas_at(10)->first, 0.9975);
  OptimizerConfig sgd = adam(0.1);
  sgd.type = OptimizerType::kSgd;  // no betas: DeepSpeed turns momentum cycling off
  EXPECT_FALSE(LrSchedule(c, sgd).betas().has_value());
  c.decay_step_size = 0;  // no decay after the cycle
  EXPECT_DOUBLE_EQ(LrSchedule(c, adam(0.5)).lr_at(30), 1e-4);
}

TEST(LrSchedule, LRRangeTest) {
  SchedulerConfig c;
  c.type = SchedulerType::kLRRangeTest;
  c.lr_range_test_min_lr = 1e-3;
  c.lr_range_test_step_size = 10;
  c.lr_range_test_step_rate = 2;
  LrSchedule s(c, adam(0.5));
  EXPECT_DOUBLE_EQ(s.lr(), 1e-3);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 2e-3);
  c.lr_range_test_staircase = true;
  LrSchedule stairs(c, adam(0.5));
  EXPECT_DOUBLE_EQ(stairs.lr_at(4), 1e-3);
  EXPECT_DOUBLE_EQ(stairs.lr_at(9), 3e-3);
}

TEST(LrSchedule, NoSchedulerKeepsTheOptimizerLr) {
  LrSchedule s(SchedulerConfig{}, adam(3e-4));
  for (int i = 0; i < 5; ++i) s.step();
  EXPECT_DOUBLE_EQ(s.lr(), 3e-4);
}

TEST(LrSchedule, RestoreIsWhereSteppingLeadsTo) {
  LrSchedule a(warmup(SchedulerType::kWarmupLR, "log"), adam(0.01)),
      b(warmup(SchedulerType::kWarmupLR, "log"), adam(0.01));
  for (int i = 0; i < 7; ++i) a.step();
  b.set_last_batch_iteration(6);
  EXPECT_DOUBLE_EQ(a.lr(), b.lr());
}
