// zero::rms_norm (zero/compute.h): the fused kernels (rms_norm_kernels.h) as an autograd function.
// It keeps x, the weight and one float per row — LibTorch's ops keep an fp32 copy of x, the
// normalised rows and their bf16 copy besides.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include "kernels/in_chunks.h"
#include "kernels/raw_data.h"
#include "kernels/rms_norm_kernels.h"
#include "zero/compute.h"

namespace zero {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows per task when several threads share the rows; the weight's gradient is summed per task
// and then over tasks in order, so that threads never change a bit.
constexpr int64_t kRowsPerTask = 64;

struct RmsNorm : torch::autograd::Function<RmsNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& w_in, double eps) {
    const int64_t C = x_in.size(-1);
    const at::Tensor x = x_in.contiguous(), w = w_in.contiguous();
    const int64_t rows = x.numel() / C;
    at::Tensor y = at::empty_like(x), r = at::empty({rows}, x.options().dtype(at::kFloat));
    const bool bf16 = x.scalar_type() == at::kBFloat16;
    kernels::in_chunks(rows, kRowsPerTask, [&](int64_t first, int64_t n) {
      for (int64_t i = first; i < first + n; ++i) {
        float* row_r = kernels::raw_data<float>(r) + i;
        if (bf16) {
          kernels::rms_norm_forward_bf16(kernels::raw_data<uint16_t>(x) + i * C, kernels::raw_data<uint16_t>(w), C,
                                         static_cast<float>(eps), kernels::raw_data<uint16_t>(y) + i * C, row_r);
        } else {
          kernels::rms_norm_forward(kernels::raw_data<float>(x) + i * C, kernels::raw_data<float>(w), C,
                                    static_cast<float>(eps), kernels::raw_data<float>(y) + i * C, row_r);
        }
      }
    });
    ctx->save_for_backward({x, w, r});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &r = saved[2];
    const at::Tensor dy = grads[0].contiguous();
    const int64_t C = x.size(-1), rows = x.numel() / C, tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
    at::Tensor dx = at::empty_like(x);
    at::Tensor dw_sums = at::zeros({tasks, C}, x.options().dtype(at::kFloat));  // one row per task
    const bool bf16 = x.scalar_type() == at::kBFloat16;
    kernels::in_chunks(rows, kRowsPerTask, [&](int64_t first, int64_t n) {
      float* dw_sum = kernels::raw_data<float>(dw_sums) + (first / kRowsPerTask) * C;
      for (int64_t i = first; i < first + n; ++i) {
        const float row_r = kernels::raw_data<float>(r)[i];
        if (bf16) {
          kernels::rms_norm_backward_bf16(kernels::raw_data<uint16_t>(dy) + i * C, kernels::raw_data<uint16_t>(x) + i * C,
                                          kernels::raw_data<uint16_t>(w), C, row_r,
                                          kernels::raw_data<uint16_t>(dx) + i * C, dw_sum);
        } else {
          kernels::rms_norm_backward(kernels::raw_data<float>(dy) + i * C, kernels::raw_data<float>(x) + i * C,
                                     kernels::raw_data<float>(w), C, row_r, kernels::raw_data<float>(dx) + i * C, dw_sum);
        }
      }
    });
    return {dx, dw_sums.sum(0).to(w.scalar_type()), at::Tensor()};
  }
};

}  // namespace

at::Tensor eager_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return compute(weight) * normed.to(x.scalar_type());
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor w = compute(weight);
  const at::ScalarType t = x.scalar_type();
  const bool fused = fused_kernels_enabled() && x.device().is_cpu() && w.device().is_cpu() && w.scalar_type() == t &&
                     (t == at::kFloat || t == at::kBFloat16) && w.dim() == 1 && w.size(0) == x.size(-1);
  if (!fused) return eager_rms_norm(x, weight, eps);
  return RmsNorm::apply(x, w, eps);
}

}  // namespace zero
