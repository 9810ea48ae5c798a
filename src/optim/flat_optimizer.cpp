#include "optim/flat_optimizer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "zero/error.h"

namespace zero::optim {
namespace {

at::Tensor zeros(int64_t n) { return at::zeros({n}, at::kFloat); }

// Adam and AdamW: m, v; bias correction; weight decay decoupled (AdamW mode) or added to the
// gradient (Adam mode).
class Adam : public FlatOptimizer {
 public:
  Adam(const OptimizerConfig& c, int64_t n, std::vector<DecayRun> runs)
      : FlatOptimizer(std::move(runs)), c_(c), m_(zeros(n)), v_(zeros(n)) {}
  void step(const at::Tensor& params, const at::Tensor& grads, const StepParams& p) override {
    at::Tensor g = grads;
    if (c_.adam_w_mode) {
      decay(params, p.lr);
    } else {
      g = with_l2(grads, params);
    }
    m_.mul_(p.beta1).add_(g, 1 - p.beta1);
    v_.mul_(p.beta2).addcmul_(g, g, 1 - p.beta2);
    const double t = static_cast<double>(p.step);
    const double bc1 = c_.bias_correction ? 1 - std::pow(p.beta1, t) : 1.0;
    const double bc2 = c_.bias_correction ? 1 - std::pow(p.beta2, t) : 1.0;
    at::Tensor denom = (v_.sqrt() / std::sqrt(bc2)).add_(c_.eps);
    params.addcdiv_(m_, denom, -p.lr / bc1);
  }
  std::vector<std::pair<std::string, at::Tensor>> state() const override {
    return {{"exp_avg", m_}, {"exp_avg_sq", v_}};
  }

 private:
  OptimizerConfig c_;
  at::Tensor m_, v_;
};

class Adagrad : public FlatOptimizer {
 public:
  Adagrad(const OptimizerConfig& c, int64_t n, std::vector<DecayRun> runs)
      : FlatOptimizer(std::move(runs)), c_(c), sum_(zeros(n)) {}
  void step(const at::Tensor& params, const at::Tensor& grads, const StepParams& p) override {
    at::Tensor g = with_l2(grads, params);
    sum_.addcmul_(g, g, 1.0);
    params.addcdiv_(g, sum_.sqrt().add_(c_.eps), -p.lr);
  }
  std::vector<std::pair<std::string, at::Tensor>> state() const override { return {{"sum", sum_}}; }

 private:
  OptimizerConfig c_;
  at::Tensor sum_;
};

// Lion: the sign of an interpolation of momentum and gradient; decoupled weight decay.
class Lion : public FlatOptimizer {
 public:
  Lion(const OptimizerConfig& c, int64_t n, std::vector<DecayRun> runs)
      : FlatOptimizer(std::move(runs)), c_(c), m_(zeros(n)) {}
  void step(const at::Tensor& params, const at::Tensor& grads, const StepParams& p) override {
    at::Tensor update = (m_ * p.beta1).add_(grads, 1 - p.beta1).sign_();
    decay(params, p.lr);
    params.add_(update, -p.lr);
    m_.mul_(p.beta2).add_(grads, 1 - p.beta2);
  }
  std::vector<std::pair<std::string, at::Tensor>> state() const override { return {{"exp_avg", m_}}; }

 private:
  OptimizerConfig c_;
  at::Tensor m_;
};

// SGD as torch.optim.SGD: L2 weight decay, momentum with dampening (the first step takes the
// gradient as it is), Nesterov.
class Sgd : public FlatOptimizer {
 public:
  Sgd(const OptimizerConfig& c, int64_t n, std::vector<DecayRun> runs)
      : FlatOptimizer(std::move(runs)), c_(c), buffer_(c.momentum != 0 ? zeros(n) : at::Tensor()) {}
  void step(const at::Tensor& params, const at::Tensor& grads, const StepParams& p) override {
    at::Tensor g = with_l2(grads, params);
    if (c_.momentum != 0) {
      if (p.step == 1) {
        buffer_.copy_(g);
      } else {
        buffer_.mul_(c_.momentum).add_(g, 1 - c_.dampening);
      }
      g = c_.nesterov ? g.add(buffer_, c_.momentum) : buffer_;
    }
    params.add_(g, -p.lr);
  }
  std::vector<std::pair<std::string, at::Tensor>> state() const override {
    if (!buffer_.defined()) return {};
    return {{"momentum_buffer", buffer_}};
  }

 private:
  OptimizerConfig c_;
  at::Tensor buffer_;
};

// Lamb as DeepSpeed's FusedLamb: an Adam direction plus L2 decay, scaled per parameter by the
// trust ratio ||w|| / ||update|| clipped to [min_coeff, max_coeff] (1 when either norm is 0).
class Lamb : public FlatOptimizer {
 public:
  Lamb(const OptimizerConfig& c, int64_t n, std::vector<DecayRun> runs, ParamFragments fragments)
      : FlatOptimizer(std::move(runs)), c_(c), m_(zeros(n)), v_(zeros(n)), fragments_(std::move(fragments)) {
    if (fragments_.fragments.empty() && fragments_.num_params == 0) {
      fragments_.num_params = 1;
      fragments_.fragments.push_back({0, n, 0});
    }
  }
  void step(const at::Tensor& params, const at::Tensor& grads, const StepParams& p) override {
    m_.mul_(p.beta1).add_(grads, 1 - p.beta1);
    v_.mul_(p.beta2).addcmul_(grads, grads, 1 - p.beta2);
    const double t = static_cast<double>(p.step);
    const double bc1 = c_.bias_correction ? 1 - std::pow(p.beta1, t) : 1.0;
    const double bc2 = c_.bias_correction ? 1 - std::pow(p.beta2, t) : 1.0;
    at::Tensor update = with_l2((m_ / bc1) / (v_ / bc2).sqrt_().add_(c_.eps), params);
    at::Tensor sums = at::zeros({fragments_.num_params, 2}, at::kDouble);
    auto s = sums.accessor<double, 2>();
    for (const auto& f : fragments_.fragments) {
      s[f.param][0] += params.narrow(0, f.offset, f.length).pow(2).sum(at::kDouble).item<double>();
      s[f.param][1] += update.narrow(0, f.offset, f.length).pow(2).sum(at::kDouble).item<double>();
    }
    if (fragments_.sum_over_ranks) fragments_.sum_over_ranks(sums);
    for (const auto& f : fragments_.fragments) {
      const double w = std::sqrt(s[f.param][0]), u = std::sqrt(s[f.param][1]);
      const double trust = w != 0 && u != 0 ? std::clamp(w / u, c_.min_coeff, c_.max_coeff) : 1.0;
      params.narrow(0, f.offset, f.length).add_(update.narrow(0, f.offset, f.length), -p.lr * trust);
    }
  }
  std::vector<std::pair<std::string, at::Tensor>> state() const override {
    return {{"exp_avg", m_}, {"exp_avg_sq", v_}};
  }

 private:
  OptimizerConfig c_;
  at::Tensor m_, v_;
  ParamFragments fragments_;
};

}  // namespace

void FlatOptimizer::decay(const at::Tensor& params, double lr) const {
  for (const DecayRun& r : runs_) {
    if (r.weight_decay != 0) params.narrow(0, r.offset, r.length).mul_(1 - lr * r.weight_decay);
  }
}

at::Tensor FlatOptimizer::with_l2(const at::Tensor& grads, const at::Tensor& params) const {
  at::Tensor g;
  for (const DecayRun& r : runs_) {
    if (r.weight_decay == 0) continue;
    if (!g.defined()) g = grads.clone();
    g.narrow(0, r.offset, r.length).add_(params.narrow(0, r.offset, r.length), r.weight_decay);
  }
  return g.defined() ? g : grads;
}

int64_t FlatOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, t] : state()) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

std::unique_ptr<FlatOptimizer> make_flat_optimizer(const OptimizerConfig& config, int64_t numel,
                                                   std::vector<DecayRun> runs, ParamFragments fragments) {
  if (runs.empty()) runs.push_back({0, numel, config.weight_decay});
  switch (config.type) {
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW:
    case OptimizerType::kCpuAdam:
      return std::make_unique<Adam>(config, numel, std::move(runs));
    case OptimizerType::kAdagrad:
      return std::make_unique<Adagrad>(config, numel, std::move(runs));
    case OptimizerType::kLion:
      return std::make_unique<Lion>(config, numel, std::move(runs));
    case OptimizerType::kSgd:
      return std::make_unique<Sgd>(config, numel, std::move(runs));
    case OptimizerType::kLamb:
      return std::make_unique<Lamb>(config, numel, std::move(runs), std::move(fragments));
    case OptimizerType::kNone:
      break;
  }
  throw Error("no optimizer configured: add an \"optimizer\" block to the DeepSpeed config", "optimizer");
}

}  // namespace zero::optim
