// zero::swiglu (zero/compute.h): the fused kernels (swiglu_kernels.h) as an autograd function.
// It keeps gate and up for the backward — LibTorch's silu · up keeps silu(gate) besides.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kernels/in_chunks.h"
#include "kernels/raw_data.h"
#include "kernels/swiglu_kernels.h"
#include "zero/compute.h"

namespace zero {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kChunk = 1 << 15;  // elements per task when several threads share a tensor

struct SwiGlu : torch::autograd::Function<SwiGlu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_in, const at::Tensor& up_in) {
    const at::Tensor gate = gate_in.contiguous(), up = up_in.contiguous();
    at::Tensor out = at::empty_like(gate);
    const bool bf16 = gate.scalar_type() == at::kBFloat16;
    kernels::in_chunks(gate.numel(), kChunk, [&](int64_t at, int64_t n) {
      if (bf16) {
        kernels::swiglu_forward_bf16(kernels::raw_data<uint16_t>(gate) + at, kernels::raw_data<uint16_t>(up) + at, kernels::raw_data<uint16_t>(out) + at, n);
      } else {
        kernels::swiglu_forward(kernels::raw_data<float>(gate) + at, kernels::raw_data<float>(up) + at, kernels::raw_data<float>(out) + at, n);
      }
    });
    ctx->save_for_backward({gate, up});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& gate = saved[0];
    const at::Tensor& up = saved[1];
    const at::Tensor dout = grads[0].contiguous();
    at::Tensor dgate = at::empty_like(gate), dup = at::empty_like(up);
    const bool bf16 = gate.scalar_type() == at::kBFloat16;
    kernels::in_chunks(gate.numel(), kChunk, [&](int64_t at, int64_t n) {
      if (bf16) {
        kernels::swiglu_backward_bf16(kernels::raw_data<uint16_t>(dout) + at, kernels::raw_data<uint16_t>(gate) + at, kernels::raw_data<uint16_t>(up) + at,
                                      kernels::raw_data<uint16_t>(dgate) + at, kernels::raw_data<uint16_t>(dup) + at, n);
      } else {
        kernels::swiglu_backward(kernels::raw_data<float>(dout) + at, kernels::raw_data<float>(gate) + at, kernels::raw_data<float>(up) + at,
                                 kernels::raw_data<float>(dgate) + at, kernels::raw_data<float>(dup) + at, n);
      }
    });
    return {dgate, dup};
  }
};

}  // namespace

bool fused_kernels_enabled() {
  static const bool enabled = [] {
    const char* setting = std::getenv("ZERO_FUSED_KERNELS");
    return setting == nullptr || std::string(setting) != "0";
  }();
  return enabled;
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  const at::ScalarType t = gate.scalar_type();
  const bool fused = fused_kernels_enabled() && gate.device().is_cpu() && up.device().is_cpu() && up.scalar_type() == t &&
                     (t == at::kFloat || t == at::kBFloat16) && gate.sizes() == up.sizes();
  if (!fused) return at::silu(gate) * up;
  return SwiGlu::apply(gate, up);
}

}  // namespace zero
