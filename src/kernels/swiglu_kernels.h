// SwiGLU's fused CPU kernels (Google Highway, dispatched at run time to the machine's best SIMD
// target), torch-free: silu(gate) · up in one pass forward and backward, over n contiguous
// elements, in fp32 or bf16 (as raw 16-bit patterns). Each computes LibTorch 1.13's silu,
// silu_backward and mul expressions in their order, and in bf16 rounds to nearest even wherever
// LibTorch's kernels round (every intermediate of its bf16 silu and silu_backward, the product
// and its gradients), so the fused ops give LibTorch's numbers but where its e^x (Sleef's) and
// Highway's differ in the last bit and that moves a rounding. Every element goes through the
// same vector code, the tail too: chunk boundaries never change a result.
#pragma once

#include <cstdint>

namespace zero::kernels {

// out = silu(gate) · up, silu(g) = g / (1 + e^−g).
void swiglu_forward(const float* gate, const float* up, float* out, int64_t n);
void swiglu_forward_bf16(const uint16_t* gate, const uint16_t* up, uint16_t* out, int64_t n);

// From dout: dgate = (dout · up) · σ(g) · (1 + g · (1 − σ(g))), dup = dout · silu(g).
void swiglu_backward(const float* dout, const float* gate, const float* up, float* dgate, float* dup, int64_t n);
void swiglu_backward_bf16(const uint16_t* dout, const uint16_t* gate, const uint16_t* up, uint16_t* dgate,
                          uint16_t* dup, int64_t n);

}  // namespace zero::kernels
