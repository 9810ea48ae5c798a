// GradReducer — turns each micro-step's parameter gradients into this rank's reduced gradient
// shards, stage by stage:
//
//   stage 0: parameter .grad tensors are views into whole bucket buffers (autograd accumulates
//            into them in place); on the boundary each bucket is all-reduced.
//   stage 1: the same buffers; on the boundary each bucket is reduce-scattered into this rank's
//            shard of itself.
//   stage 2: every micro-step, a post-accumulation hook copies each gradient into its bucket's
//            pooled buffer and frees it; a complete bucket is reduce-scattered and its shard
//            added into an fp32 accumulator of the owned shards.
//
// Buckets are reduced in index order on every rank (a bucket whose predecessors are not complete
// waits), so all ranks issue the same collectives in the same order whatever order autograd
// produces gradients in; buckets with parameters that got no gradient are completed at the end
// of backward with zeros for them. With overlap_comm the reductions are launched as buckets
// complete, during backward; otherwise after it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/flat_params.h"
#include "zero/communicator.h"

namespace torch::autograd {
struct Node;
}

namespace zero::engine {

class GradReducer {
 public:
  // `wire_dtype`: the dtype gradients are reduced in (communication_data_type); undefined: the
  // model's own.
  // `reduce_scatter` false: stages 1/2 all-reduce each bucket and keep their shard (DeepSpeed's
  // zero_optimization.reduce_scatter).
  GradReducer(FlatParams& flat, Communicator& comm, int stage, bool overlap, bool prescale, double predivide_factor,
              std::optional<at::ScalarType> wire_dtype = std::nullopt, bool reduce_scatter = true);
  ~GradReducer();

  // Before backward: whether this micro-step's gradients are reduced (stage 2: always; stages
  // 0/1: on the boundary).
  void begin_backward(bool reduce);
  // After backward: completes buckets that missed gradients, launches what is left, waits.
  void end_backward();
  // The reduced gradient of every owned element, fp32, summed over ranks (times
  // averaging_factor() it is the average; the loss was already divided by the accumulation
  // steps). Valid after the boundary's end_backward(). Stage 2 returns its accumulator; stages
  // 0/1 with one partition their fp32 buffer itself, else a new tensor. The step may scale it in
  // place: zero() follows. Note: the average is left to the caller, which folds it into its own
  // unscale-and-clip multiplication: one pass over the gradients, not two.
  at::Tensor owned_gradients();
  double averaging_factor() const;
  // After the optimizer step (or a skipped one): zero everything accumulated.
  void zero();

  int64_t gradient_bytes() const;  // what MemoryReport::gradients counts
  int64_t bucket_bytes() const;    // stage 2's bucket pool

  void on_gradient(int param);  // called by the hooks

  // Called once per micro-step for each bucket whose parameters all have their gradient (or, at
  // the end of backward, will get none): stage 3 frees the unit's gathered parameters there.
  std::function<void(int bucket)> on_bucket_complete;

 private:
  struct Pending {
    std::shared_ptr<Work> work;
    std::function<void()> finish;
  };
  void attach_gradient_views();
  at::Tensor acquire_bucket(int b);
  void launch_ready_buckets();
  void launch(int b);
  void drain(bool all);

  FlatParams& flat_;
  Communicator& comm_;
  int stage_, rank_, partitions_;
  bool overlap_, prescale_;
  double predivide_;
  std::optional<at::ScalarType> wire_dtype_;
  bool reduce_scatter_;
  bool reducing_ = false;
  at::Tensor grad_whole_;                 // stages 0/1: every bucket's gradients, model dtype
  std::vector<at::Tensor> grad_buffers_;  // stages 0/1: whole buckets, views of grad_whole_
  at::Tensor accumulator_;                // stage 2: owned shards, fp32
  // stage 2: zero() was called and no reduction has landed since: the accumulator's contents are
  // garbage that the next reducing micro-step overwrites (first_since_zero_: this one does).
  bool accumulator_stale_ = false, first_since_zero_ = false;
  std::vector<char> arrived_;                   // stage 2: gradient received this micro-step, per param
  std::vector<at::Tensor> staged_;              // stage 2: the bucket buffer in use, per bucket
  std::vector<at::Tensor> staged_pool_buffer_;  // stage 2: the pool buffer behind each staged_ view
  std::vector<at::Tensor> pool_;                // stage 2: free bucket buffers
  int64_t pool_bytes_ = 0;
  int pool_buffers_ = 0;
  std::vector<int> ready_;  // gradients received this micro-step, per bucket
  int next_launch_ = 0;
  std::deque<Pending> pending_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep the hooked nodes alive
  std::vector<uintptr_t> hook_keys_;
};

}  // namespace zero::engine
