// Each optimizer on a flat buffer against a reference: LibTorch's torch::optim where it has one,
// a plain scalar loop otherwise. Ten steps with changing gradients.
#include "optim/flat_optimizer.h"
#include "optim/cpu_kernels.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "zero/error.h"

using namespace zero;

namespace {

constexpr int64_t kN = 257;
constexpr int kSteps = 10;

at::Tensor gradient(int step) {
  torch::manual_seed(100 + step);
  return torch::randn({kN});
}

// Runs our optimizer and torch's on the same start and gradients; returns max relative difference.
double compare(const OptimizerConfig& config, torch::optim::Optimizer& reference, at::Tensor& reference_param) {
  at::Tensor ours = reference_param.detach().clone();
  auto flat = optim::make_flat_optimizer(config, kN);
  for (int s = 1; s <= kSteps; ++s) {
    at::Tensor g = gradient(s);
    flat->step(ours, g, {.lr = config.lr, .beta1 = config.beta1, .beta2 = config.beta2, .step = s});
    reference_param.mutable_grad() = g.clone();
    reference.step();
  }
  return ((ours - reference_param.detach()).abs() / reference_param.detach().abs().clamp_min(1e-6))
      .max()
      .item<double>();
}

at::Tensor start() {
  torch::manual_seed(7);
  return torch::randn({kN}).requires_grad_(true);
}

}  // namespace

TEST(FlatOptimizer, AdamWMatchesTorch) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdamW;
  c.lr = 1e-2;
  c.weight_decay = 0.1;
  c.beta2 = 0.99;
  at::Tensor p = start();
  torch::optim::AdamW ref({p}, torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(0.1));
  EXPECT_LT(compare(c, ref, p), 1e-6);
}

TEST(FlatOptimizer, AdamL2ModeMatchesTorchAdam) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdam;
  c.adam_w_mode = false;
  c.lr = 1e-2;
  c.weight_decay = 0.05;
  at::Tensor p = start();
  torch::optim::Adam ref({p}, torch::optim::AdamOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(0.05));
  EXPECT_LT(compare(c, ref, p), 1e-6);
}

TEST(FlatOptimizer, AdagradMatchesTorch) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdagrad;
  c.lr = 1e-1;
  c.eps = 1e-10;
  c.weight_decay = 0.01;
  at::Tensor p = start();
  torch::optim::Adagrad ref({p}, torch::optim::AdagradOptions(c.lr).eps(c.eps).weight_decay(0.01));
  EXPECT_LT(compare(c, ref, p), 1e-6);
}

TEST(FlatOptimizer, SgdNesterovMatchesTorch) {
  OptimizerConfig c;
  c.type = OptimizerType::kSgd;
  c.lr = 1e-2;
  c.momentum = 0.9;
  c.nesterov = true;
  c.weight_decay = 0.01;
  at::Tensor p = start();
  torch::optim::SGD ref({p}, torch::optim::SGDOptions(c.lr).momentum(0.9).nesterov(true).weight_decay(0.01));
  EXPECT_LT(compare(c, ref, p), 1e-6);
}

TEST(FlatOptimizer, SgdDampenedMomentumMatchesTorch) {
  OptimizerConfig c;
  c.type = OptimizerType::kSgd;
  c.lr = 5e-2;
  c.momentum = 0.8;
  c.dampening = 0.3;
  at::Tensor p = start();
  torch::optim::SGD ref({p}, torch::optim::SGDOptions(c.lr).momentum(0.8).dampening(0.3));
  EXPECT_LT(compare(c, ref, p), 1e-6);
}

TEST(FlatOptimizer, LionMatchesAScalarReference) {
  OptimizerConfig c;
  c.type = OptimizerType::kLion;
  c.lr = 1e-3;
  c.beta1 = 0.9;
  c.beta2 = 0.99;
  c.weight_decay = 0.1;
  at::Tensor ours = start().detach();
  std::vector<double> w(kN), m(kN, 0.0);
  for (int64_t i = 0; i < kN; ++i) w[i] = ours[i].item<double>();
  auto flat = optim::make_flat_optimizer(c, kN);
  for (int s = 1; s <= kSteps; ++s) {
    at::Tensor g = gradient(s);
    flat->step(ours, g, {.lr = c.lr, .beta1 = c.beta1, .beta2 = c.beta2, .step = s});
    for (int64_t i = 0; i < kN; ++i) {
      const double gi = g[i].item<float>();
      const double interpolated = c.beta1 * m[i] + (1 - c.beta1) * gi;
      const double sign = interpolated > 0 ? 1.0 : interpolated < 0 ? -1.0 : 0.0;
      w[i] = w[i] * (1 - c.lr * c.weight_decay) - c.lr * sign;
      m[i] = c.beta2 * m[i] + (1 - c.beta2) * gi;
    }
  }
  for (int64_t i = 0; i < kN; ++i) EXPECT_NEAR(ours[i].item<double>(), w[i], 1e-6) << i;
}

TEST(FlatOptimizer, StateBytesAreExact) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdamW;
  EXPECT_EQ(optim::make_flat_optimizer(c, 1000)->state_bytes(), 8000);  // m and v in fp32
  c.type = OptimizerType::kSgd;
  EXPECT_EQ(optim::make_flat_optimizer(c, 1000)->state_bytes(), 0);  // no momentum, no state
  c.type = OptimizerType::kNone;
  EXPECT_THROW(optim::make_flat_optimizer(c, 10), zero::Error);
}

TEST(FlatOptimizer, LambMatchesAScalarReferencePerParameter) {
  // Two "parameters" in one buffer (elements [0, 100) and [100, 257)), each with its own trust ratio.
  OptimizerConfig c;
  c.type = OptimizerType::kLamb;
  c.lr = 1e-2;
  c.weight_decay = 0.01;
  c.max_coeff = 10.0;
  c.min_coeff = 0.01;
  optim::ParamFragments fragments;
  fragments.num_params = 2;
  fragments.fragments = {{0, 100, 0}, {100, kN - 100, 1}};
  auto flat = optim::make_flat_optimizer(c, kN, {}, fragments);
  at::Tensor ours = start().detach();
  std::vector<double> w(kN), m(kN, 0.0), v(kN, 0.0);
  for (int64_t i = 0; i < kN; ++i) w[i] = ours[i].item<double>();
  for (int s = 1; s <= kSteps; ++s) {
    at::Tensor g = gradient(s);
    flat->step(ours, g, {.lr = c.lr, .beta1 = c.beta1, .beta2 = c.beta2, .step = s});
    std::vector<double> update(kN);
    const double bc1 = 1 - std::pow(c.beta1, s), bc2 = 1 - std::pow(c.beta2, s);
    for (int64_t i = 0; i < kN; ++i) {
      const double gi = g[i].item<float>();
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * gi;
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * gi * gi;
      update[i] = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + c.eps) + c.weight_decay * w[i];
    }
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 100}, {100, kN}}) {
      double wn = 0, un = 0;
      for (int64_t i = begin; i < end; ++i) {
        wn += w[i] * w[i];
        un += update[i] * update[i];
      }
      const double trust = std::clamp(std::sqrt(wn) / std::sqrt(un), c.min_coeff, c.max_coeff);
      for (int64_t i = begin; i < end; ++i) w[i] -= c.lr * trust * update[i];
    }
  }
  for (int64_t i = 0; i < kN; ++i) EXPECT_NEAR(ours[i].item<double>(), w[i], 1e-5) << i;
}

// sub_group_size: the step in tiles gives the same bits as one pass, for every optimizer, with
// decay runs and Lamb's parameters cut by tile edges (tiles of 7 and 100 over 257 elements).
TEST(FlatOptimizer, TilesGiveTheSameBitsAsOnePass) {
  const std::vector<optim::DecayRun> runs = {{0, 50, 0.0}, {50, 120, 0.1}, {170, kN - 170, 0.02}};
  optim::ParamFragments fragments;
  fragments.num_params = 3;
  fragments.fragments = {{0, 100, 0}, {100, 60, 1}, {160, kN - 160, 2}};
  for (OptimizerType type : {OptimizerType::kAdamW, OptimizerType::kAdam, OptimizerType::kAdagrad,
                             OptimizerType::kLion, OptimizerType::kSgd, OptimizerType::kLamb}) {
    OptimizerConfig c;
    c.type = type;
    c.adam_w_mode = type != OptimizerType::kAdam;
    c.lr = 1e-2;
    c.momentum = 0.9;
    c.nesterov = true;
    c.min_coeff = 0.01;
    c.max_coeff = 10;
    auto run = [&](int64_t tile) {
      at::Tensor params = start().detach().clone();
      auto flat = optim::make_flat_optimizer(c, kN, runs, fragments, tile);
      for (int s = 1; s <= kSteps; ++s) flat->step(params, gradient(s), {.lr = c.lr, .step = s});
      return params;
    };
    const at::Tensor whole = run(INT64_MAX);
    EXPECT_FALSE(whole.equal(start().detach())) << static_cast<int>(type);
    for (int64_t tile : {7, 100}) {
      EXPECT_TRUE(run(tile).equal(whole)) << "optimizer " << static_cast<int>(type) << ", tile " << tile;
    }
    // The engine's slices (Partition::step_from): any cut, stepped one slice at a time, with the
    // gradient's scale folded in, gives step()'s bits; Lamb's per-parameter trust ratio says no.
    auto flat = optim::make_flat_optimizer(c, kN, runs, fragments, 100);
    EXPECT_EQ(flat->elementwise(), type != OptimizerType::kLamb) << static_cast<int>(type);
    if (!flat->elementwise()) continue;
    at::Tensor by_step = start().detach().clone(), by_slices = by_step.clone();
    auto sliced = optim::make_flat_optimizer(c, kN, runs, fragments, 100);
    for (int s = 1; s <= kSteps; ++s) {
      const optim::StepParams p{.lr = c.lr, .step = s, .grad_scale = 0.375};
      flat->step(by_step, gradient(s), p);
      const at::Tensor g = gradient(s);
      for (int64_t at = 0; at < kN; at += 13) {
        const optim::Tile t{at, std::min<int64_t>(13, kN - at)};
        sliced->step_slice(by_slices.narrow(0, t.offset, t.length), g.narrow(0, t.offset, t.length), p, t);
      }
    }
    EXPECT_TRUE(by_slices.equal(by_step)) << "optimizer " << static_cast<int>(type);
    // (Lion's update is a sign: a uniform scale of the gradients leaves it as it is.)
    if (type != OptimizerType::kLion) EXPECT_FALSE(by_step.equal(whole)) << "optimizer " << static_cast<int>(type);
  }
  EXPECT_THROW(optim::make_flat_optimizer(OptimizerConfig{.type = OptimizerType::kAdam}, kN, {}, {}, 0), Error);
}

TEST(FlatOptimizer, TilesPerParameterCoverTheBufferAtEveryFragmentEnd) {
  // sub_group_size 0: fragments at [0, 5) and [8, 11) of a 16-element buffer, given out of order.
  std::vector<optim::ParamFragments::Fragment> fragments = {{8, 3, 1}, {0, 5, 0}, {13, 0, 2}};
  std::vector<optim::Tile> tiles = optim::tiles_per_parameter(16, fragments);
  std::vector<std::pair<int64_t, int64_t>> got;
  for (const auto& t : tiles) got.emplace_back(t.offset, t.length);
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {5, 3}, {8, 3}, {11, 5}}));
}

// The fused Adagrad and Lion kernels on the same sizes, at 1 and 2 threads: the same bits either
// way, and within 1e-6 of the LibTorch ops they replaced (weight decay and a gradient scale on).
TEST(CpuAdagradAndLion, VectorTailsAndThreadsAgreeWithLibTorchOps) {
  const float lr = 1e-2f, scale = 0.5f, wd = 0.1f, eps = 1e-10f, b1 = 0.9f, b2 = 0.99f;
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{22}, int64_t{1023}, (int64_t{1} << 20) + 3}) {
    torch::manual_seed(n);
    const at::Tensor p0 = torch::randn({n}), g = torch::randn({n}), s0 = torch::rand({n}), m0 = torch::randn({n}) * 0.1;
    std::vector<at::Tensor> adagrad, lion;
    for (int threads : {1, 2}) {
      at::set_num_threads(threads);
      at::Tensor p = p0.clone(), sum = s0.clone();
      optim::adagrad_update(p.data_ptr<float>(), g.data_ptr<float>(), sum.data_ptr<float>(), n,
                            {.lr = lr, .eps = eps, .l2 = wd, .grad_scale = scale});
      adagrad.push_back(torch::cat({p, sum}));
      at::Tensor q = p0.clone(), m = m0.clone();
      optim::lion_update(q.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), n,
                         {.lr = lr, .beta1 = b1, .beta2 = b2, .one_minus_beta1 = 1 - b1, .one_minus_beta2 = 1 - b2,
                          .decay = 1 - lr * wd, .grad_scale = scale});
      lion.push_back(torch::cat({q, m}));
    }
    at::set_num_threads(1);
    EXPECT_TRUE(adagrad[0].equal(adagrad[1])) << "n = " << n << ": threads changed Adagrad's bits";
    EXPECT_TRUE(lion[0].equal(lion[1])) << "n = " << n << ": threads changed Lion's bits";
    // The LibTorch ops of torch.optim.Adagrad and of Lion (decoupled decay).
    const at::Tensor gs = g * scale;
    const at::Tensor ga = gs.add(p0, wd), sum = s0.addcmul(ga, ga, 1.0);
    const at::Tensor adagrad_expected = torch::cat({p0.addcdiv(ga, sum.sqrt() + eps, -lr), sum});
    const at::Tensor lion_expected = torch::cat(
        {(p0 * (1 - lr * wd)).add((m0 * b1).add(gs, 1 - b1).sign(), -lr), (m0 * b2).add(gs, 1 - b2)});
    auto worst = [](const at::Tensor& got, const at::Tensor& expected) {
      return ((got - expected).abs() / expected.abs().clamp_min(1e-6)).max().item<double>();
    };
    EXPECT_LT(worst(adagrad[0], adagrad_expected), 1e-6) << "Adagrad, n = " << n;
    EXPECT_LT(worst(lion[0], lion_expected), 1e-6) << "Lion, n = " << n;
  }
}

// The fused Adam kernel on sizes that end inside a vector (1, 7, 22, 1023) and past a thread
// chunk (2^20 + 3): within 1e-6 of a plain float loop, and the same bits at 1 and 2 threads.
TEST(CpuAdam, VectorTailsAndThreadsAgreeWithAScalarLoop) {
  optim::AdamScalars s{.beta1 = 0.9f, .beta2 = 0.99f, .one_minus_beta1 = 0.1f, .one_minus_beta2 = 0.01f,
                       .step_size = 1e-2f, .sqrt_bc2 = 0.3f, .eps = 1e-8f, .decay = 0.999f, .l2 = 0.0f, .grad_scale = 0.5f};
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{22}, int64_t{1023}, (int64_t{1} << 20) + 3}) {
    torch::manual_seed(n);
    const at::Tensor p0 = torch::randn({n}), g = torch::randn({n}), m0 = torch::randn({n}) * 0.1, v0 = torch::rand({n});
    std::vector<at::Tensor> results;
    for (int threads : {1, 2}) {
      at::set_num_threads(threads);
      at::Tensor p = p0.clone(), m = m0.clone(), v = v0.clone();
      optim::adam_update(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n, s);
      results.push_back(p);
    }
    at::set_num_threads(1);
    EXPECT_TRUE(results[0].equal(results[1])) << "n = " << n << ": threads changed the bits";
    // The formula of cpu_kernels.h, one element at a time.
    const float* pp = p0.data_ptr<float>();
    const float* gg = g.data_ptr<float>();
    const float* mm = m0.data_ptr<float>();
    const float* vv = v0.data_ptr<float>();
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float gi = s.grad_scale * gg[i] + s.l2 * pp[i];
      const float mi = s.beta1 * mm[i] + s.one_minus_beta1 * gi;
      const float vi = s.beta2 * vv[i] + s.one_minus_beta2 * gi * gi;
      const float expected = s.decay * pp[i] - s.step_size * mi / (std::sqrt(vi) / s.sqrt_bc2 + s.eps);
      worst = std::max(worst, std::abs(static_cast<double>(results[0][i].item<float>()) - expected) /
                                  std::max(1e-6, std::abs(static_cast<double>(expected))));
      if (n > 4096 && i == 4095) i = n - 4096;  // the big case: its first and last 4096 elements
    }
    EXPECT_LT(worst, 1e-6) << "n = " << n;
  }
}

// The engine sums bf16 gradients as they are (Partition::sum_of_squares of views): bf16 widens to
// fp32 exactly, so the sum is the fp32 kernel's of the widened values, bit for bit, at every
// length (the vector body and the scalar tail).
TEST(CpuSumOfSquares, Bf16EqualsTheFp32SumOfTheWidenedValues) {
  torch::manual_seed(3);
  const at::Tensor values = (torch::randn({1031}) * 40).to(at::kBFloat16);
  const at::Tensor widened = values.to(at::kFloat);
  const auto* bits = reinterpret_cast<const uint16_t*>(values.data_ptr<at::BFloat16>());
  for (int64_t n : {0, 1, 3, 16, 17, 1031}) {
    const double fp32 = optim::sum_of_squares(widened.data_ptr<float>(), n);
    EXPECT_EQ(optim::sum_of_squares_bf16(bits, n), fp32) << n;
    if (n > 0) EXPECT_GT(fp32, 0) << n;
  }
  EXPECT_NEAR(optim::sum_of_squares_bf16(bits, 1031), widened.to(at::kDouble).square().sum().item<double>(), 1e-9 * 1031 * 1600);
  const at::Tensor with_inf = at::full({5}, std::numeric_limits<float>::infinity()).to(at::kBFloat16);
  EXPECT_FALSE(std::isfinite(optim::sum_of_squares_bf16(reinterpret_cast<const uint16_t*>(with_inf.data_ptr<at::BFloat16>()), 5)));
}
