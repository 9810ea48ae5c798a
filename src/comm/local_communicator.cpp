#include "comm/local_communicator.h"

#include <ATen/ATen.h>

#include "comm/collective_checks.h"
#include "comm/quantized_collectives.h"
#include "comm/mpi_work.h"

namespace zero::comm_detail {
namespace {

std::shared_ptr<Work> done() { return std::make_shared<CompletedWork>(); }

void copy_unless_same(const at::Tensor& input, const at::Tensor& output) {
  if (input.numel() > 0 && input.data_ptr() != output.data_ptr()) output.copy_(input);
}

}  // namespace

// With one rank, sum, average, max and min of a single contribution are the contribution itself.
std::shared_ptr<Work> LocalCommunicator::all_reduce(const at::Tensor& tensor, ReduceOp, const CollectiveOptions&) {
  check_tensor(CollectiveOp::kAllReduce, "input", tensor, false, 0);
  return done();
}

std::shared_ptr<Work> LocalCommunicator::reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                                                        const CollectiveOptions& options) {
  if (options.quantize_bits) return comm_detail::quantized_reduce_scatter(*this, input, output, op, options);
  check_pair(CollectiveOp::kReduceScatter, input, output, 1, 1, false, 0);
  copy_unless_same(input, output);
  return done();
}

std::shared_ptr<Work> LocalCommunicator::all_gather(const at::Tensor& input, const at::Tensor& output,
                                                    const CollectiveOptions& options) {
  if (options.quantize_bits) return comm_detail::quantized_all_gather(*this, input, output, options);
  check_pair(CollectiveOp::kAllGather, input, output, 1, 1, false, 0);
  copy_unless_same(input, output);
  return done();
}

std::shared_ptr<Work> LocalCommunicator::broadcast(const at::Tensor& tensor, int root, const CollectiveOptions&) {
  check_tensor(CollectiveOp::kBroadcast, "input", tensor, false, 0);
  check_root(root, 1, 0);
  return done();
}

std::shared_ptr<Work> LocalCommunicator::all_to_all(const at::Tensor& input, const at::Tensor& output,
                                                    const CollectiveOptions&) {
  check_pair(CollectiveOp::kAllToAll, input, output, 1, 1, false, 0);
  copy_unless_same(input, output);
  return done();
}

std::shared_ptr<Work> LocalCommunicator::barrier(const CollectiveOptions&) { return done(); }

std::unique_ptr<Communicator> LocalCommunicator::split(int color, int) {
  if (color < 0) return nullptr;
  return std::make_unique<LocalCommunicator>();
}

}  // namespace zero::comm_detail
