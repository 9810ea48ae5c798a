// The fp16 loss scaler: exact scale sequences (DeepSpeed's DynamicLossScaler semantics).
#include "zero/loss_scaler.h"

#include <gtest/gtest.h>

#include <vector>

using namespace zero;

namespace {

std::vector<double> run(const Fp16Config& c, const std::vector<bool>& overflows) {
  LossScaler s(c);
  std::vector<double> scales;
  for (bool o : overflows) {
    s.update(o);
    scales.push_back(s.scale());
  }
  return scales;
}

}  // namespace

TEST(LossScaler, DoublesAfterAWindowWithoutOverflow) {
  Fp16Config c;
  c.initial_scale_power = 4;
  c.loss_scale_window = 3;
  // Iterations 0,1,2 good: (2 - (-1)) % 3 == 0 at iteration 2 → 32.
  EXPECT_EQ(run(c, {false, false, false, false, false, false}), (std::vector<double>{16, 16, 32, 32, 32, 64}));
}

TEST(LossScaler, HysteresisDelaysTheHalving) {
  Fp16Config c;
  c.initial_scale_power = 4;
  c.loss_scale_window = 100;
  c.hysteresis = 2;
  // First overflow uses up hysteresis (16 stays), the second halves; hysteresis stays at 1 until
  // a window completes, so the third halves again.
  EXPECT_EQ(run(c, {true, true, false, true}), (std::vector<double>{16, 8, 8, 4}));
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnGoodSteps) {
  Fp16Config c;
  c.initial_scale_power = 4;
  c.loss_scale_window = 100;
  c.hysteresis = 2;
  c.consecutive_hysteresis = true;
  EXPECT_EQ(run(c, {true, false, true, false, true, true}), (std::vector<double>{16, 16, 16, 16, 16, 8}));
}

TEST(LossScaler, NeverBelowTheMinimum) {
  Fp16Config c;
  c.initial_scale_power = 2;
  c.hysteresis = 1;
  c.min_loss_scale = 2;
  EXPECT_EQ(run(c, {true, true, true}), (std::vector<double>{2, 2, 2}));
}

TEST(LossScaler, WindowCountsFromTheLastOverflow) {
  Fp16Config c;
  c.initial_scale_power = 3;
  c.loss_scale_window = 2;
  c.hysteresis = 1;
  // overflow at 0 (8 → 4); good at 1 (1-0=1), good at 2 (2-0=2 → 8), good 3, good 4 (→ 16).
  EXPECT_EQ(run(c, {true, false, false, false, false}), (std::vector<double>{4, 4, 8, 8, 16}));
}

TEST(LossScaler, StaticScaleNeverMoves) {
  Fp16Config c;
  c.loss_scale = 128;
  LossScaler s(c);
  EXPECT_FALSE(s.dynamic());
  s.update(true);
  s.update(false);
  EXPECT_EQ(s.scale(), 128);
}

TEST(LossScaler, RestoreResumesTheSequence) {
  Fp16Config c;
  c.initial_scale_power = 4;
  c.loss_scale_window = 3;
  LossScaler a(c), b(c);
  for (bool o : {false, true, false}) a.update(o);
  b.restore(a.scale(), a.iteration(), a.last_overflow_iteration(), a.hysteresis_left());
  for (bool o : {false, false, true, false}) {
    a.update(o);
    b.update(o);
    EXPECT_EQ(a.scale(), b.scale());
  }
}
