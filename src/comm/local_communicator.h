// The world-of-one backend: every collective is a local copy (or nothing), complete at once.
#pragma once

#include "zero/communicator.h"

namespace zero::comm_detail {

class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  int64_t inter_node_bytes() const override { return 0; }
  std::shared_ptr<Work> all_reduce(const at::Tensor& tensor, ReduceOp op, const CollectiveOptions& options) override;
  std::shared_ptr<Work> reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                                       const CollectiveOptions& options) override;
  std::shared_ptr<Work> all_gather(const at::Tensor& input, const at::Tensor& output,
                                   const CollectiveOptions& options) override;
  std::shared_ptr<Work> broadcast(const at::Tensor& tensor, int root, const CollectiveOptions& options) override;
  std::shared_ptr<Work> all_to_all(const at::Tensor& input, const at::Tensor& output,
                                   const CollectiveOptions& options) override;
  std::shared_ptr<Work> barrier(const CollectiveOptions& options) override;
  std::unique_ptr<Communicator> split(int color, int key) override;
};

}  // namespace zero::comm_detail
