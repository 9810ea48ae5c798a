// zero::rotary_embedding (zero/compute.h): the fused kernels (rope_kernels.h) as an autograd
// function. It reads the heads where the projection left them (q_proj's output viewed as
// [B, n, T, D], strided) and writes them contiguous for attention, keeping nothing of x for the
// backward — LibTorch's ops keep x's rotated copy and make two products and a sum per element.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include "kernels/in_chunks.h"
#include "kernels/raw_data.h"
#include "kernels/rope_kernels.h"
#include "zero/compute.h"

namespace zero {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kHeadRowsPerTask = 256;

// fn(row, position, from, to) for each of x's B·n·T rows: `from` in a [B, n, T, D] tensor with
// `in`'s strides, `to` in one with `out`'s.
template <class E, class Fn>
void for_each_head_row(const at::Tensor& in, const at::Tensor& out, Fn&& fn) {
  const int64_t n = in.size(1), positions = in.size(2), rows = in.size(0) * n * positions;
  E* const from = kernels::raw_data<E>(in);
  E* const to = kernels::raw_data<E>(out);
  kernels::in_chunks(rows, kHeadRowsPerTask, [&](int64_t first, int64_t count) {
    for (int64_t r = first; r < first + count; ++r) {
      const int64_t b = r / (n * positions), head = (r / positions) % n, t = r % positions;
      fn(t, from + b * in.stride(0) + head * in.stride(1) + t * in.stride(2),
         to + b * out.stride(0) + head * out.stride(1) + t * out.stride(2));
    }
  });
}

struct Rotary : torch::autograd::Function<Rotary> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& cos_in,
                            const at::Tensor& sin_in) {
    const at::Tensor x = x_in.stride(3) == 1 ? x_in : x_in.contiguous();
    const at::Tensor cos = cos_in.contiguous(), sin = sin_in.contiguous();
    const int64_t D = x.size(3);
    at::Tensor out = at::empty(x.sizes(), x.options());
    if (x.scalar_type() == at::kBFloat16) {
      for_each_head_row<uint16_t>(x, out, [&](int64_t t, const uint16_t* from, uint16_t* to) {
        kernels::rope_forward_bf16(from, kernels::raw_data<uint16_t>(cos) + t * D, kernels::raw_data<uint16_t>(sin) + t * D,
                                   D, to);
      });
    } else {
      for_each_head_row<float>(x, out, [&](int64_t t, const float* from, float* to) {
        kernels::rope_forward(from, kernels::raw_data<float>(cos) + t * D, kernels::raw_data<float>(sin) + t * D, D, to);
      });
    }
    ctx->save_for_backward({cos, sin});
    // The gradient in x's own layout, so that the view it came through costs no copy backward.
    ctx->saved_data["sizes"] = x.sizes();
    ctx->saved_data["strides"] = x.strides();
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &cos = saved[0], &sin = saved[1];
    const at::Tensor dout = grads[0].contiguous();
    const int64_t D = dout.size(3);
    at::Tensor dx = at::empty_strided(ctx->saved_data["sizes"].toIntVector(), ctx->saved_data["strides"].toIntVector(),
                                      dout.options());
    if (dout.scalar_type() == at::kBFloat16) {
      for_each_head_row<uint16_t>(dout, dx, [&](int64_t t, const uint16_t* from, uint16_t* to) {
        kernels::rope_backward_bf16(from, kernels::raw_data<uint16_t>(cos) + t * D,
                                    kernels::raw_data<uint16_t>(sin) + t * D, D, to);
      });
    } else {
      for_each_head_row<float>(dout, dx, [&](int64_t t, const float* from, float* to) {
        kernels::rope_backward(from, kernels::raw_data<float>(cos) + t * D, kernels::raw_data<float>(sin) + t * D, D, to);
      });
    }
    return {dx, at::Tensor(), at::Tensor()};
  }
};

at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

at::Tensor eager_rotary_embedding(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x * cos + rotate_half(x) * sin;
}

at::Tensor rotary_embedding(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const at::ScalarType t = x.scalar_type();
  const bool fused = fused_kernels_enabled() && x.device().is_cpu() && (t == at::kFloat || t == at::kBFloat16) &&
                     cos.scalar_type() == t && sin.scalar_type() == t && x.dim() == 4 && x.size(3) % 2 == 0 &&
                     cos.dim() == 2 && cos.sizes() == sin.sizes() && cos.size(0) == x.size(2) && cos.size(1) == x.size(3) &&
                     !cos.requires_grad() && !sin.requires_grad();
  if (!fused) return eager_rotary_embedding(x, cos, sin);
  return Rotary::apply(x, cos, sin);
}

}  // namespace zero
