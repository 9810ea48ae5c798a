// The dtype a model's matrix work runs in on the CPU, for a model whose weights are 16-bit
// (docs/precision.md). Models call compute() on each weight where they use it and linear() for
// their matrix multiplies; the engine decides once per process what they widen.
//
// LibTorch 1.13's CPU kernels have no float16 matmul, LayerNorm, GELU or softmax, and its bf16
// matmul is fast only on a CPU with AVX512-BF16 or AMX-BF16 (oneDNN); elsewhere it is a scalar
// fallback ~20x slower than fp32. So a float16 weight is always widened to fp32 on the CPU, and a
// bf16 one when the engine chose fp32 compute ("zerocpp": {"bf16_compute"}, ZERO_BF16_COMPUTE,
// or a CPU without bf16 instructions). The weights, their gradients and what travels between
// ranks stay 16-bit: autograd narrows each gradient back into the parameter's dtype. Activations,
// norms, softmax and the loss are then fp32. Other dtypes and devices compute as they are.
#pragma once

#include <ATen/ATen.h>

namespace zero {

// Whether bf16 weights are widened for compute in this process. The Engine sets it from the
// config, the environment and the CPU (engine::choose_bf16_compute); false until then.
void set_bf16_compute_in_fp32(bool in_fp32);
bool bf16_compute_in_fp32();

// The dtype `stored` computes in on `device`: float for float16 on the CPU, and for bf16 when
// bf16_compute_in_fp32(); otherwise `stored` itself.
at::ScalarType compute_dtype(at::ScalarType stored, const at::Device& device);

// `w` as the forward uses it: a widened copy, or `w` itself (no copy) where its dtype computes
// as it is. For vectors and tables (norms, biases, embeddings): autograd keeps no copy alive.
at::Tensor compute(const at::Tensor& w);

// x·wᵀ + b with w and b as compute() gives them, for weight matrices. Where w is widened, the
// widened copy is not kept for the backward: the backward widens w again. Kept, every weight's
// fp32 copy would live from its forward to its backward: 4 bytes per parameter more than native
// bf16, and whole weights on every rank under stage 3, which gathers and frees them.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});

// transformers' SwiGLU, silu(gate) · up, with its backward, each one pass over memory on the CPU
// for fp32 and bf16 (src/kernels/swiglu_kernels.h: LibTorch's numbers, bf16 rounded where its two
// ops round; only gate and up are kept for the backward). Other dtypes, devices or shapes:
// LibTorch's silu and mul.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

// Causal attention of q [B, H, T, D] over k, v [B, KV, T, D] → [B, H, T, D], as transformers'
// eager attention computes it: scores q·kᵀ scaled by 1/√D, keys after the query (and, with
// window > 0, keys `window` or more positions back: Mistral's sliding window) hidden, softmax in
// fp32, probabilities in q's dtype. The query heads h of each group of H/KV share key/value head
// h / (H/KV) (grouped-query attention). On the CPU in fp32 and bf16 it never holds a [T, T]
// tensor: blocks of `query_block` queries (0: attention_query_block) meet only the keys they see, and the
// backward recomputes the probabilities (src/kernels/attention.cpp); the key and value gradients
// are summed over blocks in fp32. On a GPU: LibTorch 2's fused attention where it has one.
// Queries per block by default: 64 in fp32, 128 in bf16, the fastest in `bench_profile --kernels`
// at 512 and 2048 tokens (docs/PERFORMANCE.md); a block's scores are then 9 heads × 128 × T × 2 B
// (4.5 MiB at SmolLM2-135M's 2048 tokens).
int64_t attention_query_block(at::ScalarType dtype);
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t window = 0,
                            int64_t query_block = 0);

// The same with LibTorch's ops as transformers' eager attention computes it: the [T, T] scores,
// masked, softmax in fp32 (fp64 in fp64). What causal_attention falls back to.
at::Tensor eager_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t window = 0);

// The cross-entropy of the logits h·wᵀ (h [..., C], w [V, C] as linear() uses it) against one
// target per row of h, as transformers' loss computes it: the logits taken as fp32, the mean over
// the rows whose target is not ignore_index (mean = false: their sum). On the CPU in fp32 and
// bf16 compute, `chunk_rows` rows at a time (0: 512): the [N, V] logits never exist whole; each
// chunk's gradients are computed while its logits are at hand (for an upstream gradient of 1,
// scaled in backward; in fp32 for the weight, summed over chunks), so nothing is computed twice
// (src/kernels/cross_entropy.cpp). Under no_grad, or for inputs that need no gradient, only the
// loss. Elsewhere: eager_linear_cross_entropy.
at::Tensor linear_cross_entropy(const at::Tensor& h, const at::Tensor& w, const at::Tensor& targets, bool mean = true,
                                int64_t ignore_index = -100, int64_t chunk_rows = 0);
// The same with LibTorch's ops: linear(), then cross_entropy_loss on the whole fp32 logits.
at::Tensor eager_linear_cross_entropy(const at::Tensor& h, const at::Tensor& w, const at::Tensor& targets,
                                      bool mean = true, int64_t ignore_index = -100);

// transformers' LlamaRMSNorm: weight · (x · 1/√(mean(x²) + eps) computed in fp32, cast back to
// x's dtype), with `weight` as compute() gives it. On the CPU in fp32 and bf16, one pass forward
// (src/kernels/rms_norm_kernels.h: LibTorch's roundings), keeping x and one float per row.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
// The same with LibTorch's ops.
at::Tensor eager_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// Rotary position embedding in transformers' rotate-half form, x · cos + rotate_half(x) · sin, for
// x [B, n, T, D] (any strides with the last dimension dense: a projection's output viewed by
// head) and cos, sin [T, D] in x's dtype → [B, n, T, D] contiguous. On the CPU in fp32 and bf16,
// one pass forward and backward with LibTorch's roundings (src/kernels/rope_kernels.h), its
// gradient in x's layout, nothing of x kept.
at::Tensor rotary_embedding(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// The same with LibTorch's ops.
at::Tensor eager_rotary_embedding(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// False when ZERO_FUSED_KERNELS=0: every fused op computes with LibTorch's own ops instead (to
// compare, or to rule the kernels out).
bool fused_kernels_enabled();

}  // namespace zero
