// The dtype the models compute in on the CPU, shared by the GPT and the Llama family.
//
// Note: LibTorch 1.13's CPU kernels have no float16 matmul, bmm, LayerNorm, GELU or softmax. A
// float16 model on the CPU (fp16 mixed precision) keeps its weights, gradients and communication
// in float16 and computes in float32: each weight is widened where it is used (autograd narrows
// its gradient back into the float16 .grad, where the loss scale keeps it from underflowing), so
// activations, norms, softmax and the loss are fp32. Other dtypes and devices compute as they
// are (to() of the same dtype is the tensor itself: no copy).
#pragma once

#include <ATen/ATen.h>

namespace zero::models {

inline at::Tensor compute(const at::Tensor& w) {
  return w.defined() && w.scalar_type() == at::kHalf && w.device().is_cpu() ? w.to(at::kFloat) : w;
}

}  // namespace zero::models
