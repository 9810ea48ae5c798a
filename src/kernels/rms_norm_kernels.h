// RMSNorm's fused CPU kernels (Google Highway, dispatched at run time), torch-free: one row of C
// elements per call, in fp32 or bf16 (as raw 16-bit patterns), each one pass over the row
// forward and two backward. They compute transformers' LlamaRMSNorm as LibTorch runs it:
//   n = x₃₂ · r, r = 1/√(Σ x₃₂² / C + eps) in fp32; y = w · n rounded to the dtype (n first)
// and its backward, with bf16 rounded where LibTorch's bf16 ops round (n, y, w's gradient
// products dy·n, n's gradient dy·w, and x's gradient once).
#pragma once

#include <cstdint>

namespace zero::kernels {

// y = w · n; *r = the row's 1/√(mean(x²) + eps), which the backward takes.
void rms_norm_forward(const float* x, const float* w, int64_t C, float eps, float* y, float* r);
void rms_norm_forward_bf16(const uint16_t* x, const uint16_t* w, int64_t C, float eps, uint16_t* y, float* r);

// dx = r · dn − (r³ / C) · x · Σ dn·x with dn = dy · w; dw_sum += dy · n (fp32, C floats).
void rms_norm_backward(const float* dy, const float* x, const float* w, int64_t C, float r, float* dx, float* dw_sum);
void rms_norm_backward_bf16(const uint16_t* dy, const uint16_t* x, const uint16_t* w, int64_t C, float r, uint16_t* dx,
                            float* dw_sum);

}  // namespace zero::kernels
