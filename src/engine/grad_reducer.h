// GradReducer — turns each micro-step's parameter gradients into this rank's reduced gradient
// shards. Three parts, one job each:
//
//   the hooks (here): a post-accumulation hook per parameter reports each gradient as autograd
//     writes it;
//   ReductionLauncher (reduction_launcher.h): launches bucket reductions in index order on every
//     rank, whatever order gradients arrive in, and keeps the window of those in flight;
//   a GradientStrategy (gradient_strategy.h): where gradients live and how a bucket is reduced:
//     in whole bucket buffers (stages 0/1) or streamed through pooled buffers into fp32 owned
//     shards (stages 2/3).
//
// Buckets with parameters that got no gradient are completed at the end of backward with zeros
// for them. With overlap_comm the reductions are launched as buckets complete, during backward;
// otherwise each is finished as soon as it is launched.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/flat_params.h"
#include "engine/gradient_strategy.h"
#include "engine/reduction_launcher.h"
#include "zero/communicator.h"

namespace torch::autograd {
struct Node;
}

namespace zero::engine {

class GradReducer {
 public:
  // `home`: where streamed gradients accumulate (the partition's: memory or NVMe); empty: the
  // reducer allocates its own.
  GradReducer(FlatParams& flat, Communicator& comm, const ReducerOptions& options, GradientHome home = {});
  ~GradReducer();

  // Before backward: whether this micro-step's gradients are reduced (streamed: always; in
  // bucket buffers: on the accumulation boundary).
  void begin_backward(bool reduce);
  // After backward: completes buckets that missed gradients, launches what is left, waits.
  void end_backward();
  // The reduced gradient of every owned element, fp32, summed over ranks (times
  // averaging_factor() it is the average; the loss was already divided by the accumulation
  // steps). Valid after the boundary's end_backward(). Streamed: the accumulator (undefined
  // when the gradients went to NVMe: the partition reads them from there); in buckets
  // with one partition: the fp32 buffer itself; else a new tensor. The step may scale it in
  // place: zero() follows. Note: the average is left to the caller, which folds it into its own
  // unscale-and-clip multiplication: one pass over the gradients, not two.
  at::Tensor owned_gradients() { return strategy_->owned_gradients(); }
  double averaging_factor() const;
  // After the optimizer step (or a skipped one): zero everything accumulated.
  void zero() { strategy_->zero(); }

  int64_t gradient_bytes() const { return strategy_->gradient_bytes(); }  // MemoryReport::gradients
  int64_t bucket_bytes() const { return strategy_->bucket_bytes(); }      // the streamed pool

  void on_gradient(int param);  // called by the hooks

  // Called once per reducing micro-step for each bucket whose parameters all have their gradient
  // (or, at the end of backward, will get none): stage 3 frees the unit's gathered parameters there.
  std::function<void(int bucket)> on_bucket_complete;

 private:
  FlatParams& flat_;
  Communicator& comm_;
  ReducerOptions options_;
  bool reducing_ = false;
  ReductionLauncher launcher_;
  std::unique_ptr<GradientStrategy> strategy_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep the hooked nodes alive
  std::vector<uintptr_t> hook_keys_;
};

}  // namespace zero::engine
