// Softmax over rows, the work between the matrix products of causal attention and of the loss
// (Google Highway, dispatched at run time), torch-free, in fp32 or bf16 (as raw 16-bit patterns):
// each row's scores, probabilities and their gradients take one pass over memory.
//
// Attention:
// A row is one query's raw scores s = q·kᵀ over m keys, of which [lo, hi) are visible (causal,
// and a sliding window's start). x = s · scale is rounded to bf16 in bf16 (LibTorch multiplies a
// bf16 tensor by a scalar rounded to bf16: pass it so), the softmax is fp32, and every output
// element outside [lo, hi) is 0. `work` holds m + 64 floats of scratch.
#pragma once

#include <cstdint>

namespace zero::kernels {

struct ScoreRow {
  int64_t keys;       // m: the row's length
  int64_t lo, hi;     // the visible keys
  float scale;        // 1/√head_dim, as the dtype's multiply uses it
};

// p = softmax(x) over the visible keys (exp(x − max) · (1 / Σ), LibTorch's order), in the row's
// dtype; *lse = max + log Σ, the log-sum-exp the backward recomputes p from.
void attention_softmax_row(const float* s, const ScoreRow& row, float* p, float* lse, float* work);
void attention_softmax_row_bf16(const uint16_t* s, const ScoreRow& row, uint16_t* p, float* lse, float* work);

// p = exp(x − lse): the forward's probabilities again, from its log-sum-exp; in bf16 also `p32`,
// the same m floats before their rounding, for the gradient below.
void attention_probs_row(const float* s, const ScoreRow& row, float lse, float* p);
void attention_probs_row_bf16(const uint16_t* s, const ScoreRow& row, float lse, uint16_t* p, float* p32);

// The raw scores' gradient from the probabilities' dp: ds = p · (dp − Σ p·dp) · scale with p the
// fp32 probabilities above (LibTorch's softmax backward; in bf16 rounded before and after the
// scale). In fp32, ds may be p itself.
void attention_scores_grad_row(const float* p, const float* dp, const ScoreRow& row, float* ds);
void attention_scores_grad_row_bf16(const float* p32, const uint16_t* dp, const ScoreRow& row, uint16_t* ds);

// Cross-entropy: one row of n logits x (in the model's compute dtype; the loss takes them as
// fp32, as transformers' does).
// *lse = log Σ exp(x), the loss of target t being lse − x[t].
void log_sum_exp_row(const float* x, int64_t n, float* lse);
void log_sum_exp_row_bf16(const uint16_t* x, int64_t n, float* lse);
// dx = (exp(x − lse) − [j = t]) · scale in x's dtype: the loss's gradient for an upstream scale
// (the upstream gradient, over the counted rows for a mean).
void cross_entropy_grad_row(const float* x, int64_t n, float lse, int64_t target, float scale, float* dx);
void cross_entropy_grad_row_bf16(const uint16_t* x, int64_t n, float lse, int64_t target, float scale, uint16_t* dx);

}  // namespace zero::kernels
