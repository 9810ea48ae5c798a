// Communicator::all_to_all_v's portable default (include/zero/communicator.h) and the checks every
// backend's all_to_all_v makes.
#include <ATen/ATen.h>
#include <fmt/core.h>

#include <algorithm>
#include <numeric>

#include "comm/all_to_all_v.h"
#include "comm/mpi_work.h"
#include "zero/communicator.h"
#include "zero/error.h"

namespace zero {
namespace comm_detail {

void check_all_to_all_v(const Communicator& comm, const at::Tensor& input, const std::vector<int64_t>& send_counts,
                        const at::Tensor& output, const std::vector<int64_t>& receive_counts) {
  const auto sum = [](const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); };
  const auto negative = [](const std::vector<int64_t>& v) {
    return std::any_of(v.begin(), v.end(), [](int64_t c) { return c < 0; });
  };
  const size_t n = static_cast<size_t>(comm.size());
  if (send_counts.size() != n || receive_counts.size() != n || negative(send_counts) || negative(receive_counts)) {
    throw Error(fmt::format("all_to_all_v: the send and receive counts must be {} non-negative numbers each", n),
                "all_to_all_v", comm.rank());
  }
  if (!input.is_contiguous() || !output.is_contiguous() || input.scalar_type() != output.scalar_type() ||
      input.device() != output.device()) {
    throw Error("all_to_all_v: input and output must be contiguous, of one dtype and device", "all_to_all_v", comm.rank());
  }
  if (sum(send_counts) != input.numel() || sum(receive_counts) != output.numel()) {
    throw Error(fmt::format("all_to_all_v: the counts say {} elements out and {} in, the tensors hold {} and {}",
                            sum(send_counts), sum(receive_counts), input.numel(), output.numel()),
                "all_to_all_v", comm.rank());
  }
}

}  // namespace comm_detail

std::shared_ptr<Work> Communicator::all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                                                 const at::Tensor& output, const std::vector<int64_t>& receive_counts,
                                                 const CollectiveOptions&) {
  comm_detail::check_all_to_all_v(*this, input, send_counts, output, receive_counts);
  const int n = size();
  int64_t largest = 0;
  for (int64_t c : send_counts) largest = std::max(largest, c);
  for (int64_t c : receive_counts) largest = std::max(largest, c);
  at::Tensor chunk = at::full({1}, largest, at::kLong);
  all_reduce(chunk, ReduceOp::kMax, {.async = false});
  const int64_t width = std::max<int64_t>(1, chunk.item<int64_t>());
  at::Tensor send = at::zeros({n * width}, input.options());
  at::Tensor received = at::empty({n * width}, input.options());
  int64_t from = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t count = send_counts[static_cast<size_t>(r)];
    send.narrow(0, r * width, count).copy_(input.narrow(0, from, count));
    from += count;
  }
  all_to_all(send, received, {.async = false});
  int64_t to = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t count = receive_counts[static_cast<size_t>(r)];
    output.narrow(0, to, count).copy_(received.narrow(0, r * width, count));
    to += count;
  }
  return std::make_shared<comm_detail::CompletedWork>();
}

}  // namespace zero
