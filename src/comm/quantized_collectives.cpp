#include "comm/quantized_collectives.h"

#include <ATen/ATen.h>

#include "comm/collective_checks.h"
#include "comm/quantize.h"
#include "zero/error.h"

namespace zero::comm_detail {

ThenWork::ThenWork(std::shared_ptr<Work> inner, std::function<void()> then)
    : inner_(std::move(inner)), then_(std::move(then)) {}

void ThenWork::finish() {
  if (!then_) return;
  auto then = std::move(then_);
  then_ = nullptr;
  then();
}

void ThenWork::wait() {
  inner_->wait();
  finish();
}

bool ThenWork::test() {
  if (!inner_->test()) return false;
  finish();
  return true;
}

void check_quantization(CollectiveOp collective, const CollectiveOptions& options, const at::Tensor& input, ReduceOp op,
                        int rank) {
  const int bits = options.quantize_bits;
  if (bits != 0 && bits != 4 && bits != 8) {
    throw Error(std::string(to_string(collective)) + ": quantize_bits " + std::to_string(bits) + " (0, 4 or 8)",
                to_string(collective), rank);
  }
  if (bits != 0 && !at::isFloatingType(input.scalar_type())) {
    throw Error(std::string(to_string(collective)) + ": quantized " + describe(input) + " (floating-point values only)",
                to_string(collective), rank);
  }
  if (bits != 0 && collective == CollectiveOp::kReduceScatter && op != ReduceOp::kSum && op != ReduceOp::kAvg) {
    throw Error(std::string("reduce_scatter: a quantized ") + to_string(op) + " (only sums and means are)",
                "reduce_scatter", rank);
  }
}

std::shared_ptr<Work> quantized_all_gather(Communicator& comm, const at::Tensor& input, const at::Tensor& output,
                                           const CollectiveOptions& options) {
  check_quantization(CollectiveOp::kAllGather, options, input, ReduceOp::kSum, comm.rank());
  const int bits = options.quantize_bits, n = comm.size();
  if (output.numel() != input.numel() * n) {
    throw Error("all_gather: output " + describe(output) + " is not " + std::to_string(n) + " x input " + describe(input),
                "all_gather", comm.rank());
  }
  const at::Tensor message = quantize_blocks(input, bits);
  const at::Tensor gathered = at::empty({n, message.numel()}, message.options());
  auto work = comm.all_gather(message, gathered, {.async = options.async});
  auto decode = [gathered, output, bits, n, c = input.numel()] {
    const at::Tensor rows = output.view({n, c});
    for (int r = 0; r < n; ++r) rows.select(0, r).copy_(dequantize_blocks(gathered.select(0, r), c, bits));
  };
  auto then = std::make_shared<ThenWork>(std::move(work), std::move(decode));
  if (!options.async) then->wait();
  return then;
}

std::shared_ptr<Work> quantized_reduce_scatter(Communicator& comm, const at::Tensor& input, const at::Tensor& output,
                                               ReduceOp op, const CollectiveOptions& options) {
  check_quantization(CollectiveOp::kReduceScatter, options, input, op, comm.rank());
  const int bits = options.quantize_bits, n = comm.size(), me = comm.rank();
  const int64_t c = output.numel();
  if (input.numel() != c * n) {
    throw Error("reduce_scatter: input " + describe(input) + " is not " + std::to_string(n) + " x output " +
                    describe(output),
                "reduce_scatter", me);
  }
  const at::Tensor rows = input.view({n, c});
  const int64_t q = quantized_bytes(c, bits);
  const at::Tensor send = at::zeros({n, q}, input.options().dtype(at::kByte));
  for (int r = 0; r < n; ++r) {
    if (r != me) send.select(0, r).copy_(quantize_blocks(rows.select(0, r), bits));
  }
  const at::Tensor received = at::empty_like(send);
  auto work = comm.all_to_all(send, received, {.async = options.async});
  // This rank's own chunk is read when the sum is made: it may be the output's storage.
  const at::ScalarType sum_type = at::promote_types(input.scalar_type(), at::kFloat);
  const at::Tensor own = rows.select(0, me).to(sum_type, /*non_blocking=*/false, /*copy=*/true);
  auto sum = [received, own, output, op, bits, n, me, c] {
    at::Tensor total = at::zeros({c}, own.options());
    for (int r = 0; r < n; ++r) total.add_(r == me ? own : dequantize_blocks(received.select(0, r), c, bits));
    divide_for_average(total, op, n);
    output.view(-1).copy_(total);
  };
  auto then = std::make_shared<ThenWork>(std::move(work), std::move(sum));
  if (!options.async) then->wait();
  return then;
}

}  // namespace zero::comm_detail
