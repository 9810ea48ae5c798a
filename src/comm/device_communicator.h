// Collectives for tensors on a GPU. An engine whose model is on a device talks through
// make_device_communicator's choice:
//   - NCCL (a ZERO_WITH_CUDA build, every rank of the node on a GPU of its own): the tensors
//     never leave the device; host tensors (the engine's small control values: norms, flags)
//     go through the MPI world NCCL was bootstrapped from.
//   - HostStagedCommunicator over the world's MPI (ranks sharing one GPU, which NCCL refuses,
//     or a build without NCCL): each device tensor is copied to host memory, reduced or gathered
//     there by MPI, and copied back before the call returns. A correctness path, not a fast
//     one: every collective completes before it returns (nothing overlaps).
// ZERO_DEVICE_BACKEND=nccl|mpi overrides the choice.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

#include "zero/communicator.h"
#include "zero/world.h"

namespace zero {

class HostStagedCommunicator : public Communicator {
 public:
  explicit HostStagedCommunicator(Communicator& host) : host_(host) {}
  explicit HostStagedCommunicator(std::unique_ptr<Communicator> host) : owned_(std::move(host)), host_(*owned_) {}

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  std::string backend() const override { return host_.backend() + "+host-staged"; }
  int64_t inter_node_bytes() const override { return host_.inter_node_bytes(); }
  std::shared_ptr<Work> all_reduce(const at::Tensor& tensor, ReduceOp op, const CollectiveOptions& options) override;
  std::shared_ptr<Work> reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                                       const CollectiveOptions& options) override;
  std::shared_ptr<Work> all_gather(const at::Tensor& input, const at::Tensor& output,
                                   const CollectiveOptions& options) override;
  std::shared_ptr<Work> broadcast(const at::Tensor& tensor, int root, const CollectiveOptions& options) override;
  std::shared_ptr<Work> all_to_all(const at::Tensor& input, const at::Tensor& output,
                                   const CollectiveOptions& options) override;
  std::shared_ptr<Work> barrier(const CollectiveOptions& options) override { return host_.barrier(options); }
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  // `collective` on host copies of `input` and of `output`'s shape; its result copied back into
  // `output` before it returns.
  std::shared_ptr<Work> staged(
      const at::Tensor& input, const at::Tensor& output,
      const std::function<std::shared_ptr<Work>(const at::Tensor&, const at::Tensor&)>& collective);
  std::unique_ptr<Communicator> owned_;
  Communicator& host_;
};

// The communicator for an engine whose parameters are on `device`; nullptr on the CPU (the
// world's own communicator serves). Collective over the world.
std::unique_ptr<Communicator> make_device_communicator(World& world, at::Device device);

}  // namespace zero
