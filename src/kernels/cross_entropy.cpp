// zero::linear_cross_entropy (zero/compute.h): the loss from the hidden states a chunk of rows at
// a time, so that the [N, V] logits, their fp32 copy and log-softmax never exist whole: each
// chunk's logits come from one matrix product, its rows' log-sum-exp from one pass
// (softmax_kernels.h), and only h, the weight and one float per row are kept for the backward,
// which makes each chunk's logits again.
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
                            bool mean, int64_t ignore_index, int64_t chunk_rows) {
    const int64_t C = w.size(1), V = w.size(0);
    const at::Tensor h = h_in.reshape({-1, C}).contiguous(), targets = targets_in.reshape({-1}).contiguous();
    const at::Tensor weight = compute(w);
    const int64_t N = h.size(0);
    at::Tensor lse = at::empty({N}, h.options().dtype(at::kFloat)), loss_rows = at::zeros({N}, lse.options());
    const int64_t* target = targets.data_ptr<int64_t>();
    for (int64_t start = 0; start < N; start += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, N - start);
      const at::Tensor logits = at::matmul(h.narrow(0, start, rows), weight.t()).contiguous();  // [rows, V]
      const bool bf16 = logits.scalar_type() == at::kBFloat16;
      for_each_logits_row(rows, [&](int64_t r) {
        const int64_t i = start + r;
        float* row_lse = kernels::raw_data<float>(lse) + i;
        if (bf16) {
          kernels::log_sum_exp_row_bf16(kernels::raw_data<uint16_t>(logits) + r * V, V, row_lse);
        } else {
          kernels::log_sum_exp_row(kernels::raw_data<float>(logits) + r * V, V, row_lse);
        }
        if (target[i] == ignore_index) return;
        const float x = bf16 ? static_cast<float>(logits.data_ptr<at::BFloat16>()[r * V + target[i]])
                             : logits.data_ptr<float>()[r * V + target[i]];
        kernels::raw_data<float>(loss_rows)[i] = *row_lse - x;
      });
    }
    const int64_t counted = targets.ne(ignore_index).sum().item<int64_t>();
    ctx->save_for_backward({h, w, targets, lse});
    ctx->saved_data["mean"] = mean;
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->saved_data["counted"] = counted;
    ctx->saved_data["h_sizes"] = h_in.sizes();
    const at::Tensor total = loss_rows.sum();
    return mean ? total / static_cast<double>(counted) : total;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &h = saved[0], &w = saved[1], &targets = saved[2], &lse = saved[3];
    const bool mean = ctx->saved_data["mean"].toBool();
    const int64_t ignore_index = ctx->saved_data["ignore_index"].toInt(), chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const double upstream = grads[0].item<double>();
    const float scale = static_cast<float>(mean ? upstream / static_cast<double>(ctx->saved_data["counted"].toInt())
                                                : upstream);
    const at::Tensor weight = compute(w);
    const int64_t N = h.size(0), V = w.size(0);
    at::Tensor dh = at::empty_like(h);
    // The weight's gradient gathers from every chunk: summed in fp32.
    at::Tensor dw = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
    const int64_t* target = targets.data_ptr<int64_t>();
    for (int64_t start = 0; start < N; start += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, N - start);
      const at::Tensor hs = h.narrow(0, start, rows);
      const at::Tensor logits = at::matmul(hs, weight.t()).contiguous();
      at::Tensor dlogits = at::empty_like(logits);
      const bool bf16 = logits.scalar_type() == at::kBFloat16;
      for_each_logits_row(rows, [&](int64_t r) {
        const int64_t i = start + r;
        if (target[i] == ignore_index) {
          if (bf16) std::fill_n(kernels::raw_data<uint16_t>(dlogits) + r * V, V, uint16_t{0});
          else std::fill_n(kernels::raw_data<float>(dlogits) + r * V, V, 0.0f);
          return;
        }
        const float row_lse = kernels::raw_data<float>(lse)[i];
        if (bf16) {
          kernels::cross_entropy_grad_row_bf16(kernels::raw_data<uint16_t>(logits) + r * V, V, row_lse, target[i], scale,
                                               kernels::raw_data<uint16_t>(dlogits) + r * V);
        } else {
          kernels::cross_entropy_grad_row(kernels::raw_data<float>(logits) + r * V, V, row_lse, target[i], scale,
                                          kernels::raw_data<float>(dlogits) + r * V);
        }
      });
      dh.narrow(0, start, rows).copy_(at::matmul(dlogits, weight));
      dw.add_(at::matmul(dlogits.t(), hs));
    }
    return {dh.view(ctx->saved_data["h_sizes"].toIntVector()), dw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
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
  return LinearCrossEntropy::apply(h, w, targets, mean, ignore_index, chunk_rows > 0 ? chunk_rows : kDefaultChunkRows);
}

}  // namespace zero
