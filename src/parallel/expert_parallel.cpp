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

// The rows in counts per pair, through one all-to-all with variable counts (elements per pair:
// rows × the row's elements).
at::Tensor exchange(Communicator& group, const at::Tensor& rows, const std::vector<int64_t>& send_counts,
                    const std::vector<int64_t>& receive_counts) {
  std::vector<int64_t> shape = rows.sizes().vec();
  // (A rank may send no row at all: the row's size from the shape, never from a row.)
  int64_t row = 1;
  for (size_t d = 1; d < shape.size(); ++d) row *= shape[d];
  int64_t received = 0;
  std::vector<int64_t> send_elements, receive_elements;
  for (int64_t c : send_counts) send_elements.push_back(c * row);
  for (int64_t c : receive_counts) {
    receive_elements.push_back(c * row);
    received += c;
  }
  shape[0] = received;
  at::Tensor out = at::empty(shape, rows.options());
  group.all_to_all_v(rows.contiguous().view(-1), send_elements, out.view(-1), receive_elements, {.async = false});
  return out;
}

struct ExchangeRows : torch::autograd::Function<ExchangeRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, int64_t group_address,
                            std::vector<int64_t> send_counts, std::vector<int64_t> receive_counts) {
    ctx->saved_data["group"] = group_address;
    ctx->saved_data["send"] = send_counts;
    ctx->saved_data["receive"] = receive_counts;
    return exchange(*reinterpret_cast<Communicator*>(group_address), rows, send_counts, receive_counts);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator& group = *reinterpret_cast<Communicator*>(ctx->saved_data["group"].toInt());
    const std::vector<int64_t> send = ctx->saved_data["send"].toIntVector(),
                               receive = ctx->saved_data["receive"].toIntVector();
    // Back the way the rows came: what was received is sent, in the same counts.
    return {exchange(group, grads[0], receive, send), at::Tensor(), at::Tensor(), at::Tensor()};
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
  return ExchangeRows::apply(rows, reinterpret_cast<int64_t>(&group), send_counts, receive_counts);
}

}  // namespace zero::expert_parallel
