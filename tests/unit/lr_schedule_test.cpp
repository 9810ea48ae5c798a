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

// The Hugging Face Trainer's schedules (transformers' optimization.py lambdas, worked out for the
// seed's quick start: lr 2e-5, warmup_ratio 0.03 of 100 steps = 3 warmup steps). lr_at(k - 1) is
// the lr of the step after k applied steps; the first step runs at 0.
TEST(LrSchedule, TrainerCosineAndLinearAsTransformers) {
  SchedulerConfig s;
  s.warmup_num_steps = 3;
  s.total_num_steps = 100;
  s.type = SchedulerType::kTrainerCosine;
  const LrSchedule cosine(s, adam(2e-5));
  EXPECT_EQ(cosine.lr(), 0.0);
  const std::vector<std::pair<int64_t, double>> cosine_expected = {
      {1, 6.666666666666667e-06}, {2, 1.3333333333333333e-05}, {3, 2e-05}, {4, 1.9994755690455154e-05},
      {52, 9.838069311974987e-06}, {99, 5.2443095448506674e-09}, {100, 0.0}, {130, 4.3604297014909359e-06}};  // past the end the cosine rises again, as HF's
  for (const auto& [k, lr] : cosine_expected) EXPECT_NEAR(cosine.lr_at(k - 1), lr, 1e-20) << k;
  s.type = SchedulerType::kTrainerLinear;
  const LrSchedule linear(s, adam(2e-5));
  const std::vector<std::pair<int64_t, double>> linear_expected = {
      {0, 0.0}, {2, 1.3333333333333333e-05}, {4, 1.9793814432989692e-05}, {52, 9.896907216494846e-06},
      {99, 2.061855670103093e-07}, {100, 0.0}, {101, 0.0}};
  for (const auto& [k, lr] : linear_expected) EXPECT_NEAR(linear.lr_at(k - 1), lr, 1e-20) << k;
  s.type = SchedulerType::kTrainerConstantWithWarmup;
  const LrSchedule warm(s, adam(2e-5));
  EXPECT_NEAR(warm.lr_at(0), 6.666666666666667e-06, 1e-20);
  EXPECT_EQ(warm.lr_at(2), 2e-5);
  EXPECT_EQ(warm.lr_at(99), 2e-5);
  s.type = SchedulerType::kTrainerConstant;
  const LrSchedule constant(s, adam(2e-5));
  EXPECT_EQ(constant.lr(), 2e-5);
  EXPECT_EQ(constant.lr_at(50), 2e-5);
  // No warmup: the first step runs at the full lr.
  s.type = SchedulerType::kTrainerLinear;
  s.warmup_num_steps = 0;
  EXPECT_EQ(LrSchedule(s, adam(2e-5)).lr(), 2e-5);
}
