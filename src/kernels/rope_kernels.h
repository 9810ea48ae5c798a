// Rotary position embedding's fused CPU kernels (Google Highway, dispatched at run time),
// torch-free: one head's row of D elements per call, in fp32 or bf16 (as raw 16-bit patterns).
// They compute transformers' rotate-half form, x · cos + rotate_half(x) · sin with
// rotate_half(x) = [−x₂, x₁] (x₁, x₂ the row's halves), as LibTorch's ops do: each product and
// the sum rounded to the dtype, and backward the two paths' gradients rounded, then summed once.
#pragma once

#include <cstdint>

namespace zero::kernels {

// out = x · cos + rotate_half(x) · sin (cos and sin: the row's position's D values).
void rope_forward(const float* x, const float* cos, const float* sin, int64_t D, float* out);
void rope_forward_bf16(const uint16_t* x, const uint16_t* cos, const uint16_t* sin, int64_t D, uint16_t* out);

// dx = dout · cos + rotate_halfᵀ(dout · sin), rotate_halfᵀ(g) = [g₂, −g₁].
void rope_backward(const float* dout, const float* cos, const float* sin, int64_t D, float* dx);
void rope_backward_bf16(const uint16_t* dout, const uint16_t* cos, const uint16_t* sin, int64_t D, uint16_t* dx);

}  // namespace zero::kernels
