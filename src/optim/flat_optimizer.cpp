#include "optim/flat_optimizer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "optim/cpu_kernels.h"
#include "zero/error.h"

namespace zero::optim {
namespace {

at::Tensor zeros(int64_t n, at::Device device) { return at::zeros({n}, at::TensorOptions(at::kFloat).device(device)); }
at::Tensor slice(const at::Tensor& t, Tile tile) { return t.narrow(0, tile.offset, tile.length); }

// Adam and AdamW: m, v; bias correction; weight decay decoupled (AdamW mode) or added to the
// gradient (Adam mode).
class Adam : public FlatOptimizer {
 public:
  Adam(const OptimizerConfig& c, int64_t n, std::vector<DecayRun> runs, int64_t tile, at::Device device)
      : FlatOptimizer(std::move(runs), tile), c_(c), m_(zeros(n, device)), v_(zeros(n, device)) {}
  std::vector<std::pair<std::string, at::Tensor>> state() const override {
    return {{"exp_avg", m_}, {"exp_avg_sq", v_}};
  }

 protected:
  bool fuses_grad_scale() const override { return true; }
  // One fused pass per run of equal weight decay (cpu_kernels.h): no temporaries.
  void step_tile(const at::Tensor& params, const at::Tensor& grads, const StepParams& p, Tile t) override {
    const double n = static_cast<double>(p.step);
    const double bc1 = c_.bias_correction ? 1 - std::pow(p.beta1, n) : 1.0;
    const double bc2 = c_.bias_correction ? 1 - std::pow(p.beta2, n) : 1.0;
    AdamScalars s{.beta1 = static_cast<float>(p.beta1),
                  .beta2 = static_cast<float>(p.beta2),
                  .one_minus_beta1 = static_cast<float>(1 - p.beta1),
                  .one_minus_beta2 = static_cast<float>(1 - p.beta2),
                  .step_size = static_cast<float>(p.lr / bc1),
                  .sqrt_bc2 = static_cast<float>(std::sqrt(bc2)),
                  .eps = static_cast<float>(c_.eps),
                  .grad_scale = static_cast<float>(p.grad_scale)};
    if (!params.is_cpu()) return step_on_device(params, grads, state_slice(m_, 0, t), state_slice(v_, 1, t), s, p, t);
    float* w = params.data_ptr<float>();
    const float* g = grads.data_ptr<float>();
    float* m = state_slice(m_, 0, t).data_ptr<float>();
    float* v = state_slice(v_, 1, t).data_ptr<float>();
    for_decay_pieces_in(t, [&](int64_t begin, int64_t length, double wd) {
      s.decay = c_.adam_w_mode ? static_cast<float>(1 - p.lr * wd) : 1.0f;
      s.l2 = c_.adam_w_mode ? 0.0f : static_cast<float>(wd);
      adam_update(w + begin, g + begin, m + begin, v + begin, length, s);
    });
  }

 private:
  // The same formula as the CPU kernel (AdamLanes), in tensor operations on the device's own
  // kernels: the order of operations is the kernel's, the rounding the device's.
  void step_on_device(const at::Tensor& params, const at::Tensor& grads, const at::Tensor& m, const at::Tensor& v,
                      AdamScalars s, const StepParams& p, Tile t) const {
    for_decay_pieces_in(t, [&](int64_t begin, int64_t length, double wd) {
      at::Tensor w = params.narrow(0, begin, length), mi = m.narrow(0, begin, length), vi = v.narrow(0, begin, length);
      at::Tensor g = grads.narrow(0, begin, length);
      if (s.grad_scale != 1.0f) g = g * s.grad_scale;
      if (!c_.adam_w_mode && wd != 0) g = g + w * wd;
      mi.mul_(s.beta1).add_(g, s.one_minus_beta1);
      vi.mul_(s.beta2).addcmul_(g, g, s.one_minus_beta2);
      if (c_.adam_w_mode && wd != 0) w.mul_(1 - p.lr * wd);
      w.addcdiv_(mi, (vi.sqrt() / s.sqrt_bc2).add_(s.eps), -s.step_size);
    });
  }

  OptimizerConfig c_;
  at::Tensor m_, v_;
};

// Adagrad: L2 weight decay added to the gradient (torch.optim.Adagrad without lr decay).
class Adagrad : public FlatOptimizer {
 public:
  Adagrad(const OptimizerConfig& c, int64_t n, std::vector<DecayRun> runs, int64_t tile, at::Device device)
      : FlatOptimizer(std::move(runs), tile), c_(c), sum_(zeros(n, device)) {}
  std::vector<std::pair<std::string, at::Tensor>> state() const override { return {{"sum", sum_}}; }

 protected:
  bool fuses_grad_scale() const override { return true; }
  void step_tile(const at::Tensor& params, const at::Tensor& grads, const StepParams& p, Tile t) override {
    AdagradScalars s{.lr = static_cast<float>(p.lr), .eps = static_cast<float>(c_.eps),
                     .grad_scale = static_cast<float>(p.grad_scale)};
    if (!params.is_cpu()) {  // the kernel's formula in tensor operations
      const at::Tensor sum = state_slice(sum_, 0, t);
      for_decay_pieces_in(t, [&](int64_t begin, int64_t length, double wd) {
        at::Tensor w = params.narrow(0, begin, length), si = sum.narrow(0, begin, length);
        at::Tensor g = grads.narrow(0, begin, length) * s.grad_scale;
        if (wd != 0) g.add_(w, wd);
        si.addcmul_(g, g);
        w.addcdiv_(g, si.sqrt().add_(s.eps), -s.lr);
      });
      return;
    }
    float* w = params.data_ptr<float>();
    const float* g = grads.data_ptr<float>();
    float* sum = state_slice(sum_, 0, t).data_ptr<float>();
    for_decay_pieces_in(t, [&](int64_t begin, int64_t length, double wd) {
      s.l2 = static_cast<float>(wd);
      adagrad_update(w + begin, g + begin, sum + begin, length, s);
    });
  }

 private:
  OptimizerConfig c_;
  at::Tensor sum_;
};

// Lion: the sign of an interpolation of momentum and gradient; decoupled weight decay.
class Lion : public FlatOptimizer {
 public:
  Lion(const OptimizerConfig& c, int64_t n, std::vector<DecayRun> runs, int64_t tile, at::Device device)
      : FlatOptimizer(std::move(runs), tile), c_(c), m_(zeros(n, device)) {}
  std::vector<std::pair<std::string, at::Tensor>> state() const override { return {{"exp_avg", m_}}; }

 protected:
  bool fuses_grad_scale() const override { return true; }
  void step_tile(const at::Tensor& params, const at::Tensor& grads, const StepParams& p, Tile t) override {
    LionScalars s{.lr = static_cast<float>(p.lr),
                  .beta1 = static_cast<float>(p.beta1),
                  .beta2 = static_cast<float>(p.beta2),
                  .one_minus_beta1 = static_cast<float>(1 - p.beta1),
                  .one_minus_beta2 = static_cast<float>(1 - p.beta2),
                  .grad_scale = static_cast<float>(p.grad_scale)};
    if (!params.is_cpu()) {  // the kernel's formula in tensor operations
      const at::Tensor m = state_slice(m_, 0, t);
      for_decay_pieces_in(t, [&](int64_t begin, int64_t length, double wd) {
        at::Tensor w = params.narrow(0, begin, length), mi = m.narrow(0, begin, length);
        const at::Tensor g = grads.narrow(0, begin, length) * s.grad_scale;
        const at::Tensor update = (mi * s.beta1).add_(g, s.one_minus_beta1).sign_();
        if (wd != 0) w.mul_(1 - p.lr * wd);
        w.add_(update, -s.lr);
        mi.mul_(s.beta2).add_(g, s.one_minus_beta2);
      });
      return;
    }
    float* w = params.data_ptr<float>();
    const float* g = grads.data_ptr<float>();
    float* m = state_slice(m_, 0, t).data_ptr<float>();
    for_decay_pieces_in(t, [&](int64_t begin, int64_t length, double wd) {
      s.decay = static_cast<float>(1 - p.lr * wd);
      lion_update(w + begin, g + begin, m + begin, length, s);
    });
  }

 private:
  OptimizerConfig c_;
  at::Tensor m_;
};

// SGD as torch.optim.SGD: L2 weight decay, momentum with dampening (the first step takes the
// gradient as it is), Nesterov.
class Sgd : public FlatOptimizer {
 public:
  Sgd(const OptimizerConfig& c, int64_t n, std::vector<DecayRun> runs, int64_t tile, at::Device device)
      : FlatOptimizer(std::move(runs), tile), c_(c), buffer_(c.momentum != 0 ? zeros(n, device) : at::Tensor()) {}
  std::vector<std::pair<std::string, at::Tensor>> state() const override {
    if (!buffer_.defined()) return {};
    return {{"momentum_buffer", buffer_}};
  }

 protected:
  void step_tile(const at::Tensor& params, const at::Tensor& grads, const StepParams& p, Tile t) override {
    at::Tensor g = with_l2(grads, params, t);
    if (c_.momentum != 0) {
      at::Tensor buffer = state_slice(buffer_, 0, t);
      if (p.step == 1) {
        buffer.copy_(g);
      } else {
        buffer.mul_(c_.momentum).add_(g, 1 - c_.dampening);
      }
      g = c_.nesterov ? g.add(buffer, c_.momentum) : buffer;
    }
    params.add_(g, -p.lr);
  }

 private:
  OptimizerConfig c_;
  at::Tensor buffer_;
};

// Lamb as DeepSpeed's FusedLamb: an Adam direction plus L2 decay, scaled per parameter by the
// trust ratio ||w|| / ||update|| clipped to [min_coeff, max_coeff] (1 when either norm is 0).
class Lamb : public FlatOptimizer {
 public:
  Lamb(const OptimizerConfig& c, int64_t n, std::vector<DecayRun> runs, ParamFragments fragments, int64_t tile,
       at::Device device)
      : FlatOptimizer(std::move(runs), tile),
        c_(c),
        m_(zeros(n, device)),
        v_(zeros(n, device)),
        fragments_(std::move(fragments)) {
    if (fragments_.fragments.empty() && fragments_.num_params == 0) {
      fragments_.num_params = 1;
      fragments_.fragments.push_back({0, n, 0});
    }
  }
  // Two passes over the tiles: moments and whole-parameter norms (summed over ranks), then the
  // update scaled by each parameter's trust ratio (FlatOptimizer::step, through step_tile). The
  // direction is computed in both passes rather than kept: keeping it would cost a buffer.
  void step(const at::Tensor& params, const at::Tensor& grads, const StepParams& scaled) override {
    if (scaled.grad_scale != 1.0) grads.mul_(scaled.grad_scale);  // both passes read the scaled gradient
    StepParams p = scaled;
    p.grad_scale = 1.0;
    const double n = static_cast<double>(p.step);
    bc1_ = c_.bias_correction ? 1 - std::pow(p.beta1, n) : 1.0;
    bc2_ = c_.bias_correction ? 1 - std::pow(p.beta2, n) : 1.0;
    at::Tensor sums = at::zeros({fragments_.num_params, 2}, at::kDouble);
    auto s = sums.accessor<double, 2>();
    for (const Tile t : tiles(params.numel())) {
      const at::Tensor g = slice(grads, t), w = slice(params, t);
      slice(m_, t).mul_(p.beta1).add_(g, 1 - p.beta1);
      slice(v_, t).mul_(p.beta2).addcmul_(g, g, 1 - p.beta2);
      const at::Tensor update = direction(w, t);
      for_fragments_in(t, [&](const ParamFragments::Fragment& f, int64_t begin, int64_t length) {
        s[f.param][0] += w.narrow(0, begin, length).pow(2).sum(at::kDouble).item<double>();
        s[f.param][1] += update.narrow(0, begin, length).pow(2).sum(at::kDouble).item<double>();
      });
    }
    if (fragments_.sum_over_ranks) fragments_.sum_over_ranks(sums);
    trust_.assign(static_cast<size_t>(fragments_.num_params), 1.0);
    for (int i = 0; i < fragments_.num_params; ++i) {
      const double w = std::sqrt(s[i][0]), u = std::sqrt(s[i][1]);
      if (w != 0 && u != 0) trust_[static_cast<size_t>(i)] = std::clamp(w / u, c_.min_coeff, c_.max_coeff);
    }
    FlatOptimizer::step(params, grads, p);
  }
  std::vector<std::pair<std::string, at::Tensor>> state() const override {
    return {{"exp_avg", m_}, {"exp_avg_sq", v_}};
  }
  bool elementwise() const override { return false; }

 protected:
  void step_tile(const at::Tensor& params, const at::Tensor&, const StepParams& p, Tile t) override {
    const at::Tensor update = direction(params, t);
    for_fragments_in(t, [&](const ParamFragments::Fragment& f, int64_t begin, int64_t length) {
      params.narrow(0, begin, length).add_(update.narrow(0, begin, length), -p.lr * trust_[static_cast<size_t>(f.param)]);
    });
  }

 private:
  // Adam's bias-corrected direction plus L2 decay, for tile t (params: the tile).
  at::Tensor direction(const at::Tensor& params, Tile t) const {
    return with_l2((slice(m_, t) / bc1_) / (slice(v_, t) / bc2_).sqrt_().add_(c_.eps), params, t);
  }
  // fn(fragment, begin within the tile, length) for each fragment's part inside tile t.
  template <class Fn>
  void for_fragments_in(Tile t, Fn&& fn) const {
    for (const auto& f : fragments_.fragments) {
      const int64_t begin = std::max(f.offset, t.offset), end = std::min(f.offset + f.length, t.offset + t.length);
      if (begin < end) fn(f, begin - t.offset, end - begin);
    }
  }

  OptimizerConfig c_;
  at::Tensor m_, v_;
  ParamFragments fragments_;
  double bc1_ = 1, bc2_ = 1;
  std::vector<double> trust_;  // per parameter, for this step
};

}  // namespace

void FlatOptimizer::step(const at::Tensor& params, const at::Tensor& grads, const StepParams& p) {
  for (const Tile t : tiles(params.numel())) step_slice(slice(params, t), slice(grads, t), p, t);
}

void FlatOptimizer::step_slice(const at::Tensor& params, const at::Tensor& grads, const StepParams& p, Tile t) {
  if (p.grad_scale != 1.0 && !fuses_grad_scale()) grads.mul_(p.grad_scale);
  step_tile(params, grads, p, t);
}

template <class Fn>
void FlatOptimizer::for_decay_pieces_in(Tile t, Fn&& fn) const {
  int64_t at = t.offset;  // runs are in order and do not overlap
  const int64_t end = t.offset + t.length;
  for (const DecayRun& r : runs_) {
    const int64_t begin = std::max(r.offset, at), stop = std::min(r.offset + r.length, end);
    if (begin >= stop) continue;
    if (begin > at) fn(at - t.offset, begin - at, 0.0);
    fn(begin - t.offset, stop - begin, r.weight_decay);
    at = stop;
  }
  if (at < end) fn(at - t.offset, end - at, 0.0);
}

std::vector<Tile> tiles_per_parameter(int64_t numel, const std::vector<ParamFragments::Fragment>& fragments) {
  std::vector<ParamFragments::Fragment> sorted = fragments;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
  std::vector<Tile> out;
  int64_t at = 0;
  for (const auto& f : sorted) {
    if (f.length == 0) continue;
    if (f.offset > at) out.push_back({at, f.offset - at});
    out.push_back({f.offset, f.length});
    at = f.offset + f.length;
  }
  if (at < numel) out.push_back({at, numel - at});
  return out;
}

std::vector<Tile> tiles_of(int64_t numel, int64_t tile) {
  std::vector<Tile> out;
  for (int64_t offset = 0; offset < numel; offset += tile) out.push_back({offset, std::min(tile, numel - offset)});
  return out;
}

template <class Fn>
void FlatOptimizer::for_runs_in(Tile t, Fn&& fn) const {
  for (const DecayRun& r : runs_) {
    const int64_t begin = std::max(r.offset, t.offset), end = std::min(r.offset + r.length, t.offset + t.length);
    if (begin < end && r.weight_decay != 0) fn(begin - t.offset, end - begin, r.weight_decay);
  }
}

at::Tensor FlatOptimizer::with_l2(const at::Tensor& grads, const at::Tensor& params, Tile t) const {
  at::Tensor g;
  for_runs_in(t, [&](int64_t begin, int64_t length, double wd) {
    if (!g.defined()) g = grads.clone();
    g.narrow(0, begin, length).add_(params.narrow(0, begin, length), wd);
  });
  return g.defined() ? g : grads;
}

int64_t FlatOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, t] : state()) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

void FlatOptimizer::step_tile_with(const at::Tensor& params, const at::Tensor& grads,
                                   const std::vector<at::Tensor>& states, const StepParams& p, Tile t) {
  if (p.grad_scale != 1.0 && !fuses_grad_scale()) grads.mul_(p.grad_scale);
  window_ = states;
  struct Unbind {  // the window is this call's only, even when the step throws
    std::vector<at::Tensor>& window;
    ~Unbind() { window.clear(); }
  } unbind{window_};
  step_tile(params, grads, p, t);
}

std::unique_ptr<FlatOptimizer> make_flat_optimizer(const OptimizerConfig& config, int64_t numel,
                                                   std::vector<DecayRun> runs, ParamFragments fragments, int64_t tile,
                                                   bool streamed, at::Device device) {
  if (tile < 1) throw Error("sub_group_size must be at least 1", "zero_optimization.sub_group_size");
  if (runs.empty()) runs.push_back({0, numel, config.weight_decay});
  // Streamed: the states live elsewhere (NVMe offload) and come tile by tile to step_tile_with.
  const int64_t n = streamed ? 0 : numel;
  switch (config.type) {
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW:
    case OptimizerType::kCpuAdam:
      return std::make_unique<Adam>(config, n, std::move(runs), tile, device);
    case OptimizerType::kAdagrad:
      return std::make_unique<Adagrad>(config, n, std::move(runs), tile, device);
    case OptimizerType::kLion:
      return std::make_unique<Lion>(config, n, std::move(runs), tile, device);
    case OptimizerType::kSgd:
      return std::make_unique<Sgd>(config, n, std::move(runs), tile, device);
    case OptimizerType::kLamb:
      if (streamed)
        throw Error("Lamb's trust ratios need every tile twice per step: not with NVMe offload "
                    "(zero_optimization.offload_optimizer.device \"nvme\"); use Adam, AdamW, Adagrad, Lion or SGD",
                    "optimizer.type");
      return std::make_unique<Lamb>(config, numel, std::move(runs), std::move(fragments), tile, device);
    case OptimizerType::kNone:
      break;
  }
  throw Error("no optimizer configured: add an \"optimizer\" block to the DeepSpeed config", "optimizer");
}

}  // namespace zero::optim
