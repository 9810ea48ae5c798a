// zero::causal_attention (zero/compute.h): exact attention a block of queries at a time, so no
// [T, T] tensor ever exists. Each block of queries meets only the keys it may see (a causal
// block's keys end at its last query; a window's start at its first query's reach), in one
// matrix product per block; the row kernels (softmax_kernels.h) turn its scores into
// probabilities in one pass and keep each row's log-sum-exp, from which the backward recomputes
// them. The rows of a block are whole (every key a query sees is in its block's product), so
// the softmax is the ordinary one, not an online rescaling.
//
// Grouped-query heads: the G = H / KV query heads that share key/value head g stack their rows
// into one [G·n, D] matrix against g's keys, as transformers' repeat_kv makes them meet the same
// keys, without copying K or V.
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/softmax_kernels.h"
#include "kernels/raw_data.h"
#include "zero/compute.h"
#include "zero/error.h"

namespace zero {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The shape of one call and the blocks it walks.
struct Layout {
  int64_t B, H, KV, G, T, D, window, block;
  float scale;  // 1/√D as the dtype's multiply by a scalar uses it (bf16 rounds the scalar first)
  bool bf16;

  struct Block {
    int64_t first_query, queries;  // [first_query, first_query + queries)
    int64_t first_key, keys;       // the keys any of them sees
  };
  std::vector<Block> blocks() const {
    std::vector<Block> out;
    for (int64_t qs = 0; qs < T; qs += block) {
      const int64_t n = std::min(block, T - qs), ks = window > 0 ? std::max<int64_t>(0, qs - window + 1) : 0;
      out.push_back({qs, n, ks, qs + n - ks});
    }
    return out;
  }

  // The kernels' view of row r of a block's scores [B, KV, G·n, keys]: query first_query + r % n.
  kernels::ScoreRow row(const Block& b, int64_t r) const {
    const int64_t query = b.first_query + r % b.queries;
    const int64_t lo = window > 0 ? std::max<int64_t>(0, query - window + 1) - b.first_key : 0;
    return {b.keys, lo, query + 1 - b.first_key, scale};
  }
  // Where row r's log-sum-exp lives in [B, H, T]: its (b, head) slab is r / n.
  int64_t lse_index(const Block& b, int64_t r) const { return (r / b.queries) * T + b.first_query + r % b.queries; }

  // A block's rows of a [B, H, T, D] tensor as [B, KV, G·n, D] (a copy), and back.
  at::Tensor stacked(const at::Tensor& t, const Block& b) const {
    return t.narrow(2, b.first_query, b.queries).reshape({B, KV, G * b.queries, D});
  }
  void unstack(const at::Tensor& from, at::Tensor& into, const Block& b) const {
    into.narrow(2, b.first_query, b.queries).copy_(from.view({B, H, b.queries, D}));
  }
};

Layout layout_of(const at::Tensor& q, const at::Tensor& k, int64_t window, int64_t query_block) {
  Layout l{};
  l.B = q.size(0), l.H = q.size(1), l.T = q.size(2), l.D = q.size(3), l.KV = k.size(1);
  l.G = l.H / l.KV, l.window = window, l.block = query_block > 0 ? query_block : attention_query_block(q.scalar_type());
  l.bf16 = q.scalar_type() == at::kBFloat16;
  const double scale = 1.0 / std::sqrt(static_cast<double>(l.D));
  l.scale = l.bf16 ? static_cast<float>(c10::BFloat16(static_cast<float>(scale))) : static_cast<float>(scale);
  return l;
}

// fn(row, work) for every row of a block's scores, rows shared among LibTorch's threads (each
// row's result is the same on any thread).
template <class Fn>
void for_each_row(const Layout& l, const Layout::Block& b, Fn&& fn) {
  const int64_t rows = l.B * l.KV * l.G * b.queries;
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / b.keys), [&](int64_t begin, int64_t end) {
    std::vector<float> work(b.keys + 64);
    for (int64_t r = begin; r < end; ++r) fn(r, work.data());
  });
}

struct CausalAttention : torch::autograd::Function<CausalAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k_in,
                            const at::Tensor& v_in, int64_t window, int64_t query_block) {
    const at::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
    const Layout l = layout_of(q, k, window, query_block);
    at::Tensor out = at::empty_like(q);
    at::Tensor lse = at::empty({l.B, l.H, l.T}, q.options().dtype(at::kFloat));
    for (const Layout::Block& b : l.blocks()) {
      const at::Tensor keys = k.narrow(2, b.first_key, b.keys), values = v.narrow(2, b.first_key, b.keys);
      const at::Tensor scores = at::matmul(l.stacked(q, b), keys.transpose(-2, -1));  // [B, KV, G·n, keys]
      at::Tensor probs = at::empty_like(scores);
      for_each_row(l, b, [&](int64_t r, float* work) {
        const kernels::ScoreRow row = l.row(b, r);
        float* row_lse = kernels::raw_data<float>(lse) + l.lse_index(b, r);
        if (l.bf16) {
          kernels::attention_softmax_row_bf16(kernels::raw_data<uint16_t>(scores) + r * b.keys, row,
                                              kernels::raw_data<uint16_t>(probs) + r * b.keys, row_lse, work);
        } else {
          kernels::attention_softmax_row(kernels::raw_data<float>(scores) + r * b.keys, row, kernels::raw_data<float>(probs) + r * b.keys,
                                         row_lse, work);
        }
      });
      l.unstack(at::matmul(probs, values), out, b);
    }
    ctx->save_for_backward({q, k, v, lse});
    ctx->saved_data["window"] = window;
    ctx->saved_data["query_block"] = query_block;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &lse = saved[3];
    const at::Tensor dout = grads[0].contiguous();
    const Layout l = layout_of(q, k, ctx->saved_data["window"].toInt(), ctx->saved_data["query_block"].toInt());
    at::Tensor dq = at::empty_like(q);
    // Key and value gradients gather from every block that sees them: summed in fp32.
    const auto sums = k.options().dtype(at::kFloat);
    at::Tensor dk = at::zeros(k.sizes(), sums), dv = at::zeros(v.sizes(), sums);
    // bf16: a block's fp32 probabilities, kept between their two uses (sized for the biggest block).
    at::Tensor probs32;
    if (l.bf16) {
      int64_t largest = 0;
      for (const Layout::Block& b : l.blocks()) largest = std::max(largest, l.B * l.H * b.queries * b.keys);
      probs32 = at::empty({largest}, sums);
    }
    for (const Layout::Block& b : l.blocks()) {
      const at::Tensor keys = k.narrow(2, b.first_key, b.keys), values = v.narrow(2, b.first_key, b.keys);
      const at::Tensor queries = l.stacked(q, b), dattended = l.stacked(dout, b);
      const at::Tensor scores = at::matmul(queries, keys.transpose(-2, -1));
      at::Tensor probs = at::empty_like(scores);
      for_each_row(l, b, [&](int64_t r, float*) {
        const float row_lse = kernels::raw_data<float>(lse)[l.lse_index(b, r)];
        if (l.bf16) {
          kernels::attention_probs_row_bf16(kernels::raw_data<uint16_t>(scores) + r * b.keys, l.row(b, r), row_lse,
                                            kernels::raw_data<uint16_t>(probs) + r * b.keys,
                                            kernels::raw_data<float>(probs32) + r * b.keys);
        } else {
          kernels::attention_probs_row(kernels::raw_data<float>(scores) + r * b.keys, l.row(b, r), row_lse,
                                       kernels::raw_data<float>(probs) + r * b.keys);
        }
      });
      dv.narrow(2, b.first_key, b.keys).add_(at::matmul(probs.transpose(-2, -1), dattended));
      const at::Tensor dprobs = at::matmul(dattended, values.transpose(-2, -1));
      at::Tensor dscores = std::move(probs);  // its last use was above (fp32: read and overwritten in place)
      for_each_row(l, b, [&](int64_t r, float*) {
        if (l.bf16) {
          kernels::attention_scores_grad_row_bf16(kernels::raw_data<float>(probs32) + r * b.keys,
                                                  kernels::raw_data<uint16_t>(dprobs) + r * b.keys, l.row(b, r),
                                                  kernels::raw_data<uint16_t>(dscores) + r * b.keys);
        } else {
          float* p = kernels::raw_data<float>(dscores) + r * b.keys;
          kernels::attention_scores_grad_row(p, kernels::raw_data<float>(dprobs) + r * b.keys, l.row(b, r), p);
        }
      });
      l.unstack(at::matmul(dscores, keys), dq, b);
      dk.narrow(2, b.first_key, b.keys).add_(at::matmul(dscores.transpose(-2, -1), queries));
    }
    return {dq, dk.to(k.scalar_type()), dv.to(v.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

int64_t attention_query_block(at::ScalarType dtype) { return dtype == at::kBFloat16 ? 128 : 64; }

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t window,
                            int64_t query_block) {
  if (!(q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes() && q.size(0) == k.size(0) && q.size(2) == k.size(2) &&
        q.size(3) == k.size(3) && k.size(1) > 0 && q.size(1) % k.size(1) == 0)) {
    throw Error("causal_attention takes q [B, H, T, D] and k, v [B, KV, T, D] with H a multiple of KV");
  }
  const bool windowed = window > 0 && q.size(2) > window;
#if TORCH_VERSION_MAJOR >= 2
  // On a GPU, LibTorch 2's fused attention (flash or memory-efficient kernels, as transformers'
  // "sdpa" attention uses). Key/value heads are repeated for the query heads that share them.
  if (!q.device().is_cpu() && !windowed) {
    const int64_t G = q.size(1) / k.size(1);
    return at::scaled_dot_product_attention(q, G == 1 ? k : k.repeat_interleave(G, 1),
                                            G == 1 ? v : v.repeat_interleave(G, 1), {}, 0.0, true);
  }
#endif
  const at::ScalarType t = q.scalar_type();
  const bool fused = fused_kernels_enabled() && q.device().is_cpu() && (t == at::kFloat || t == at::kBFloat16) &&
                     k.scalar_type() == t && v.scalar_type() == t && k.device().is_cpu() && v.device().is_cpu();
  if (!fused) return eager_causal_attention(q, k, v, window);
  return CausalAttention::apply(q, k, v, windowed ? window : 0, query_block);
}

at::Tensor eager_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t window) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), KV = k.size(1), G = H / KV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const at::Tensor scores = q.reshape({B, KV, G * T, D}).matmul(k.transpose(-2, -1)).view({B, H, T, T}) * scale;
  const auto mask_options = torch::TensorOptions(torch::kBool).device(q.device());
  at::Tensor blocked = torch::ones({T, T}, mask_options).triu(1);  // a key after the query
  if (window > 0 && T > window) blocked = blocked | torch::ones({T, T}, mask_options).tril(-window);  // too far back
  const at::ScalarType softmax_dtype = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor probs = torch::softmax(scores.masked_fill(blocked, -INFINITY), -1, softmax_dtype).to(q.scalar_type());
  return probs.view({B, KV, G * T, T}).matmul(v).view({B, H, T, D});
}

}  // namespace zero
