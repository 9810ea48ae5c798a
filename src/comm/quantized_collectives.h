// ZeRO++'s quantized collectives on any backend (CollectiveOptions::quantize_bits): built from the
// backend's own all-gather and all-to-all of the quantized messages (quantize.h), so every backend
// gets them by calling these first. The hierarchical communicator reduce-scatters in two hops
// instead (hierarchical_communicator.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

#include "zero/communicator.h"

namespace zero::comm_detail {

// A collective followed by local work on its result (decoding), run once, by whoever first sees
// the collective complete.
class ThenWork : public Work {
 public:
  ThenWork(std::shared_ptr<Work> inner, std::function<void()> then);
  void wait() override;
  bool test() override;
  std::string error() const override { return inner_->error(); }

 private:
  void finish();
  std::shared_ptr<Work> inner_;
  std::function<void()> then_;
};

// Throws unless `options.quantize_bits` is 0, 4 or 8, `input` is floating-point, and `op`
// (reduce-scatter) is a sum or mean.
void check_quantization(CollectiveOp collective, const CollectiveOptions& options, const at::Tensor& input, ReduceOp op,
                        int rank);

// All-gather in which every rank's input travels quantized; every rank's chunk of `output`,
// its own included, holds the decoded values, so all ranks end with the same tensor.
std::shared_ptr<Work> quantized_all_gather(Communicator& comm, const at::Tensor& input, const at::Tensor& output,
                                           const CollectiveOptions& options);
// Reduce-scatter as one all-to-all of quantized chunks, summed in float32 (float64 for float64
// input) in rank order (this rank's own chunk exact), then rounded once to the output's dtype.
std::shared_ptr<Work> quantized_reduce_scatter(Communicator& comm, const at::Tensor& input, const at::Tensor& output,
                                               ReduceOp op, const CollectiveOptions& options);

}  // namespace zero::comm_detail
