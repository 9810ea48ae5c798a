#include "zero/compute.h"

#include <torch/torch.h>

#include <atomic>

namespace zero {
namespace {

std::atomic<bool> bf16_in_fp32{false};

// linear() on widened copies that the backward makes again instead of keeping (zero/compute.h).
// The gradients are the ones F::linear's backward gives on the widened weight; autograd's
// validation narrows them into the inputs' dtypes. Without a bias: autograd functions take no
// undefined tensors.
at::Tensor widened_forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                           const at::Tensor& b) {
  ctx->save_for_backward({x, w});
  const at::ScalarType wide = compute_dtype(w.scalar_type(), w.device());
  return at::linear(x.to(wide), w.to(wide), b.defined() ? b.to(wide) : b);
}

torch::autograd::variable_list widened_backward(torch::autograd::AutogradContext* ctx, const at::Tensor& g,
                                                bool has_bias) {
  const auto saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const at::Tensor& w = saved[1];
  const int64_t out = w.size(0), in = w.size(1);
  const at::Tensor rows = g.reshape({-1, out});
  torch::autograd::variable_list grads(has_bias ? 3 : 2);
  if (ctx->needs_input_grad(0)) grads[0] = g.matmul(w.to(g.scalar_type()));
  if (ctx->needs_input_grad(1)) grads[1] = rows.t().mm(x.to(g.scalar_type()).reshape({-1, in}));
  if (has_bias && ctx->needs_input_grad(2)) grads[2] = rows.sum(0);
  return grads;
}

struct WidenedLinear : torch::autograd::Function<WidenedLinear> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& b) {
    return widened_forward(ctx, x, w, b);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return widened_backward(ctx, grads[0], true);
  }
};

struct WidenedLinearNoBias : torch::autograd::Function<WidenedLinearNoBias> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    return widened_forward(ctx, x, w, at::Tensor());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return widened_backward(ctx, grads[0], false);
  }
};

}  // namespace

void set_bf16_compute_in_fp32(bool in_fp32) { bf16_in_fp32.store(in_fp32); }

bool bf16_compute_in_fp32() { return bf16_in_fp32.load(); }

at::ScalarType compute_dtype(at::ScalarType stored, const at::Device& device) {
  if (!device.is_cpu()) return stored;
  if (stored == at::kHalf || (stored == at::kBFloat16 && bf16_compute_in_fp32())) return at::kFloat;
  return stored;
}

at::Tensor compute(const at::Tensor& w) {
  return w.defined() ? w.to(compute_dtype(w.scalar_type(), w.device())) : w;
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (compute_dtype(w.scalar_type(), w.device()) == w.scalar_type()) return at::linear(x, w, b);
  return b.defined() ? WidenedLinear::apply(x, w, b) : WidenedLinearNoBias::apply(x, w);
}

}  // namespace zero
