// zero::linear_cross_entropy (zero/compute.h): the loss from the hidden states a chunk of rows at
// a time, so that the [N, V] logits, their fp32 copy and log-softmax never exist whole: each
// chunk's logits come from one matrix product, its rows' log-sum-exp and the logits' gradient
// from one pass each (softmax_kernels.h), and the chunk's shares of h's and the weight's
// gradients from two more products, all in the forward. What waits for the backward is those
// gradients (h's size; the weight's in fp32 over several chunks, else in its dtype), which it
// scales by the upstream gradient.
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>

#include "kernels/raw_data.h"
#include "kernels/softmax_kernels.h"
#include "zero/compute.h"
#include "zero/error.h"

namespace zero {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows per chunk: 512 rows of a 49152-token vocabulary are 48 MiB of bf16 logits (96 in fp32).
constexpr int64_t kDefaultChunkRows = 512;

// fn(row) for rows [0, n), shared among LibTorch's threads.
template <class Fn>
void for_each_logits_row(int64_t n, Fn&& fn) {
  at::parallel_for(0, n, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) fn(r);
  });
}

struct LinearCrossEntropy : torch::autograd::Function<LinearCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h_in, const at::Tensor& w, const at::Tensor& targets_in,
                            bool mean, int64_t ignore_index, int64_t chunk_rows, bool dh_needed, bool dw_needed) {
    const int64_t C = w.size(1), V = w.size(0);
    const at::Tensor h = h_in.reshape({-1, C}).contiguous(), targets = targets_in.reshape({-1}).contiguous();
    const at::Tensor weight = compute(w);
    const int64_t N = h.size(0);
    const int64_t counted = targets.ne(ignore_index).sum().item<int64_t>();
    // The gradients for an upstream gradient of 1, while each chunk's logits are at hand: the
    // backward only scales them (as Liger's fused linear cross-entropy does). Not when nothing
    // needs them (evaluation).
    const float scale = mean ? 1.0f / static_cast<float>(counted) : 1.0f;
    at::Tensor dh = dh_needed ? at::empty_like(h) : at::Tensor();
    // The weight's gradient: one chunk's product is it, rounded once as the unfused product
    // rounds it; several chunks' are summed in fp32 (the dtype's rounding once, at the end).
    const bool one_chunk = N <= chunk_rows;
    at::Tensor dw = dw_needed && !one_chunk ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();
    at::Tensor loss_rows = at::zeros({N}, h.options().dtype(at::kFloat));
    const int64_t* target = targets.data_ptr<int64_t>();
    for (int64_t start = 0; start < N; start += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, N - start);
      const at::Tensor hs = h.narrow(0, start, rows);
      const at::Tensor logits = at::matmul(hs, weight.t()).contiguous();  // [rows, V]
      at::Tensor dlogits = dh_needed || dw_needed ? at::empty_like(logits) : at::Tensor();
      const bool bf16 = logits.scalar_type() == at::kBFloat16;
      for_each_logits_row(rows, [&](int64_t r) {
        const int64_t i = start + r;
        float lse;
        if (bf16) {
          kernels::log_sum_exp_row_bf16(kernels::raw_data<uint16_t>(logits) + r * V, V, &lse);
        } else {
          kernels::log_sum_exp_row(kernels::raw_data<float>(logits) + r * V, V, &lse);
        }
        const bool ignored = target[i] == ignore_index;
        if (!ignored) {
          const float x = bf16 ? static_cast<float>(logits.data_ptr<at::BFloat16>()[r * V + target[i]])
                               : logits.data_ptr<float>()[r * V + target[i]];
          kernels::raw_data<float>(loss_rows)[i] = lse - x;
        }
        if (!dlogits.defined()) return;
        if (ignored) {
          if (bf16) std::fill_n(kernels::raw_data<uint16_t>(dlogits) + r * V, V, uint16_t{0});
          else std::fill_n(kernels::raw_data<float>(dlogits) + r * V, V, 0.0f);
        } else if (bf16) {
          kernels::cross_entropy_grad_row_bf16(kernels::raw_data<uint16_t>(logits) + r * V, V, lse, target[i], scale,
                                               kernels::raw_data<uint16_t>(dlogits) + r * V);
        } else {
          kernels::cross_entropy_grad_row(kernels::raw_data<float>(logits) + r * V, V, lse, target[i], scale,
                                          kernels::raw_data<float>(dlogits) + r * V);
        }
      });
      if (dh_needed) {
        at::Tensor dh_rows = dh.narrow(0, start, rows);
        at::mm_out(dh_rows, dlogits, weight);
      }
      if (dw_needed && one_chunk) dw = at::mm(dlogits.t(), hs);
      if (dw_needed && !one_chunk) dw.add_(at::mm(dlogits.t(), hs));
    }
    ctx->save_for_backward({dh_needed ? dh.view(h_in.sizes()) : dh, dw});
    const at::Tensor total = loss_rows.sum();
    return mean ? total / static_cast<double>(counted) : total;
  }

  // The forward's gradients times the upstream one (the loss scale, 1 / accumulation steps, ...).
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &dh = saved[0], &dw = saved[1];
    const at::Tensor upstream = grads[0];
    if (upstream.item<double>() == 1.0) {  // the usual case: nothing to scale
      return {dh, dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
    return {dh.defined() ? dh * upstream.to(dh.scalar_type()) : dh,
            dw.defined() ? (dw.to(at::kFloat) * upstream).to(dw.scalar_type()) : dw, at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor eager_linear_cross_entropy(const at::Tensor& h, const at::Tensor& w, const at::Tensor& targets, bool mean,
                                      int64_t ignore_index) {
  const at::Tensor logits = zero::linear(h, w);
  return at::cross_entropy_loss(logits.reshape({-1, w.size(0)}).to(at::kFloat), targets.reshape(-1), {},
                                mean ? at::Reduction::Mean : at::Reduction::Sum, ignore_index);
}

at::Tensor linear_cross_entropy(const at::Tensor& h, const at::Tensor& w, const at::Tensor& targets, bool mean,
                                int64_t ignore_index, int64_t chunk_rows) {
  if (w.dim() != 2 || h.size(-1) != w.size(1) || h.numel() / h.size(-1) != targets.numel()) {
    throw Error("linear_cross_entropy takes h [..., C], w [V, C] and one target per row of h");
  }
  const at::ScalarType t = compute_dtype(w.scalar_type(), w.device());
  const bool fused = fused_kernels_enabled() && h.device().is_cpu() && w.device().is_cpu() && h.scalar_type() == t &&
                     (t == at::kFloat || t == at::kBFloat16) && targets.scalar_type() == at::kLong;
  if (!fused) return eager_linear_cross_entropy(h, w, targets, mean, ignore_index);
  const int64_t V = w.size(0);
  const at::Tensor out_of_range = targets.ne(ignore_index) & (targets.lt(0) | targets.ge(V));
  if (out_of_range.any().item<bool>()) {
    throw Error("linear_cross_entropy: a target outside the vocabulary [0, " + std::to_string(V) + ")");
  }
  const bool grad = at::GradMode::is_enabled();
  return LinearCrossEntropy::apply(h, w, targets, mean, ignore_index, chunk_rows > 0 ? chunk_rows : kDefaultChunkRows,
                                   grad && h.requires_grad(), grad && w.requires_grad());
}

}  // namespace zero
