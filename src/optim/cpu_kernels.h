// Fused CPU kernels over fp32 tiles (Google Highway, dispatched at run time to the best SIMD
// target of the machine): one pass over memory each, no temporaries.
//
// Note: the optimizer step is memory-bound. Written as LibTorch ops, Adam reads and writes the
// tile ~9 times and allocates two tile-sized temporaries; with DeepSpeed's default
// sub_group_size (1e9) a tile is the whole shard, and at 200 M parameters those temporaries
// (hundreds of MB, above glibc's 32 MiB mmap ceiling) were mapped and faulted in every step.
#pragma once

#include <cstdint>

namespace zero::optim {

struct AdamScalars {
  float beta1 = 0.9f, beta2 = 0.999f;
  float one_minus_beta1 = 0.1f, one_minus_beta2 = 0.001f;  // rounded from double, as LibTorch does
  float step_size = 1e-3f;                                 // lr / (1 - beta1^t)
  float sqrt_bc2 = 1.0f;                                   // sqrt(1 - beta2^t)
  float eps = 1e-8f;
  float decay = 1.0f;       // AdamW: params *= 1 - lr * weight_decay first; 1 otherwise
  float l2 = 0.0f;          // Adam: weight_decay * params added to the gradient; 0 for AdamW
  float grad_scale = 1.0f;  // the gradient is multiplied by this first (average, unscale, clip)
};

// One Adam/AdamW step over n elements: g = grad_scale·grad + l2·p; p = decay·p;
// m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²; p −= step_size · m / (√v / sqrt_bc2 + eps).
void adam_update(float* params, const float* grads, float* m, float* v, int64_t n, const AdamScalars& s);

struct AdagradScalars {
  float lr = 1e-2f, eps = 1e-10f;
  float l2 = 0.0f;          // weight_decay · params added to the gradient
  float grad_scale = 1.0f;  // the gradient is multiplied by this first
};

// One Adagrad step over n elements: g = grad_scale·grad + l2·p; sum += g²; p += −lr · g / (√sum + eps).
void adagrad_update(float* params, const float* grads, float* sum, int64_t n, const AdagradScalars& s);

struct LionScalars {
  float lr = 1e-4f;
  float beta1 = 0.9f, beta2 = 0.99f;
  float one_minus_beta1 = 0.1f, one_minus_beta2 = 0.01f;
  float decay = 1.0f;       // params *= 1 − lr · weight_decay first
  float grad_scale = 1.0f;  // the gradient is multiplied by this first
};

// One Lion step over n elements: g = grad_scale·grad; u = sign(β1·m + (1−β1)·g); p = decay·p − lr·u;
// m = β2·m + (1−β2)·g.
void lion_update(float* params, const float* grads, float* m, int64_t n, const LionScalars& s);

// Σ x² over n floats, accumulated in double. Not finite exactly when some x is not (a finite
// float's square cannot overflow a double sum of fewer than 2^900 terms): the fp16 overflow check.
double sum_of_squares(const float* x, int64_t n);
// The same sum over bf16 values (their bit patterns): bf16 widens to fp32 exactly, so it equals
// sum_of_squares of the widened values, bit for bit.
double sum_of_squares_bf16(const uint16_t* x, int64_t n);

// ZERO_SIMD: "avx2" caps these kernels at AVX2 on a machine with AVX-512 (the sum of squares
// adds in as many lanes as a vector holds, so its bits follow the target). With LibTorch's
// ATEN_CPU_CAPABILITY=avx2 and OpenBLAS's OPENBLAS_CORETYPE=Haswell, every x86-64 machine with
// AVX2 then trains to the same bits (tests/golden). Null, "" or "auto": the machine's best.
// Anything else: zero::Error naming ZERO_SIMD.
void limit_simd(const char* target);

}  // namespace zero::optim
