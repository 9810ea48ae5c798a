// Expert parallelism's exchange (include/zero/expert_parallel.h).
#include "zero/expert_parallel.h"

#include <ATen/ATen.h>
#include <fmt/core.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <numeric>

#include "zero/communicator.h"
#include "zero/error.h"

namespace zero::expert_parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The rows in counts per pair, through one equal all-to-all: each pair's rows padded to `chunk`.
at::Tensor padded_all_to_all(Communicator& group, const at::Tensor& rows, const std::vector<int64_t>& send_counts,
                             const std::vector<int64_t>& receive_counts, int64_t chunk) {
  const int n = group.size();
  std::vector<int64_t> row_shape = rows.sizes().vec();
  row_shape.erase(row_shape.begin());
  std::vector<int64_t> padded_shape{n * chunk};
  padded_shape.insert(padded_shape.end(), row_shape.begin(), row_shape.end());
  at::Tensor send = at::zeros(padded_shape, rows.options());
  int64_t from = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t count = send_counts[static_cast<size_t>(r)];
    if (count > 0) send.narrow(0, r * chunk, count).copy_(rows.narrow(0, from, count));
    from += count;
  }
  at::Tensor received = at::empty(padded_shape, rows.options());
  group.all_to_all(send, received, {.async = false});
  std::vector<at::Tensor> parts;
  for (int r = 0; r < n; ++r) parts.push_back(received.narrow(0, r * chunk, receive_counts[static_cast<size_t>(r)]));
  return at::cat(parts, 0);
}

struct ExchangeRows : torch::autograd::Function<ExchangeRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, int64_t group_address,
                            std::vector<int64_t> send_counts, std::vector<int64_t> receive_counts, int64_t chunk) {
    ctx->saved_data["group"] = group_address;
    ctx->saved_data["send"] = send_counts;
    ctx->saved_data["receive"] = receive_counts;
    ctx->saved_data["chunk"] = chunk;
    return padded_all_to_all(*reinterpret_cast<Communicator*>(group_address), rows.contiguous(), send_counts,
                             receive_counts, chunk);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator& group = *reinterpret_cast<Communicator*>(ctx->saved_data["group"].toInt());
    const std::vector<int64_t> send = ctx->saved_data["send"].toIntVector(),
                               receive = ctx->saved_data["receive"].toIntVector();
    // Back the way the rows came: what was received is sent, in the same chunks.
    return {padded_all_to_all(group, grads[0].contiguous(), receive, send, ctx->saved_data["chunk"].toInt()),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

void check_counts(Communicator& group, const std::vector<int64_t>& counts, const char* what) {
  if (static_cast<int>(counts.size()) != group.size() ||
      std::any_of(counts.begin(), counts.end(), [](int64_t c) { return c < 0; })) {
    throw Error(fmt::format("expert parallelism: {} counts must be {} non-negative numbers", what, group.size()),
                "expert_parallel");
  }
}

}  // namespace

at::Tensor all_gather_counts(Communicator& group, const at::Tensor& counts) {
  const at::Tensor mine = counts.to(at::kLong).contiguous().view(-1);
  at::Tensor all = at::empty({group.size() * mine.numel()}, at::kLong);
  group.all_gather(mine, all, {.async = false});
  return all.view({group.size(), mine.numel()});
}

at::Tensor exchange_rows(Communicator& group, const at::Tensor& rows, const std::vector<int64_t>& send_counts,
                         const std::vector<int64_t>& receive_counts) {
  check_counts(group, send_counts, "send");
  check_counts(group, receive_counts, "receive");
  if (std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0}) != rows.size(0)) {
    throw Error(fmt::format("expert parallelism: {} rows to send, the counts say {}", rows.size(0),
                            std::accumulate(send_counts.begin(), send_counts.end(), int64_t{0})),
                "expert_parallel");
  }
  // Every rank pads to the same chunk: the largest count of any pair (one all-reduce).
  int64_t largest = 0;
  for (int64_t c : send_counts) largest = std::max(largest, c);
  for (int64_t c : receive_counts) largest = std::max(largest, c);
  at::Tensor chunk = at::full({1}, largest, at::kLong);
  group.all_reduce(chunk, ReduceOp::kMax, {.async = false});
  return ExchangeRows::apply(rows, reinterpret_cast<int64_t>(&group), send_counts, receive_counts,
                             std::max<int64_t>(1, chunk.item<int64_t>()));
}

}  // namespace zero::expert_parallel
