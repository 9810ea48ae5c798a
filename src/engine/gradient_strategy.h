// Where gradients live between backward and the optimizer step, and how a complete bucket is
// reduced: the interface of the two strategies behind GradReducer (grad_reducer.h), and the
// options that pick one.
//
//   InBucketGradients (in_bucket_gradients.h, stages 0/1): parameter .grad tensors are views into whole bucket buffers
//     (autograd accumulates into them in place, across micro-steps too); on the boundary each
//     bucket is all-reduced whole (stage 0) or reduce-scattered into this rank's shard of itself.
//   StreamedGradients (streamed_gradients.h, stages 2/3): every micro-step, each gradient is copied into its bucket's
//     pooled buffer and freed; a complete bucket is reduce-scattered and this rank's shard added
//     into an fp32 accumulator of the owned shards. At most two pooled buffers while a reduction
//     can give one back.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>
#include <vector>

#include "engine/flat_params.h"
#include "engine/reduction_launcher.h"
#include "zero/communicator.h"

namespace zero::engine {

struct ReducerOptions {
  enum class Gradients { kInBucketBuffers, kStreamedIntoShards };
  Gradients gradients = Gradients::kInBucketBuffers;
  // Every rank keeps every bucket's whole reduced gradient (stage 0: all-reduce); else each keeps
  // its shard. Only with kInBucketBuffers.
  bool whole_buckets = false;
  bool overlap = false;  // launch reductions during backward, asynchronously (overlap_comm)
  // Multiply gradients by 1/predivide_factor before reducing (prescale_gradients).
  bool prescale = false;
  double predivide_factor = 1.0;
  // The dtype gradients are reduced in (communication_data_type); unset: the model's own.
  std::optional<at::ScalarType> wire_dtype;
  // false: all-reduce each bucket and keep this rank's shard (zero_optimization.reduce_scatter).
  bool reduce_scatter = true;
  // ZeRO++ qgZ (zero_quantized_gradients): reduce-scatters move gradients in this many bits (4);
  // 0: as they are. All-reduces never quantize.
  int quantize_bits = 0;
};

// Where StreamedGradients accumulates the owned gradients: an fp32 tensor of owned_numel
// elements in host memory, or `put`, which takes each bucket's reduced shard in owned order
// (`replace`: the first reduction since zero(), else added to what it holds) — the optimizer's
// swap file on NVMe (gradient_stream.h). Neither: a tensor of its own.
struct GradientHome {
  at::Tensor memory;
  std::function<void(int64_t owned_offset, const at::Tensor& shard, bool replace)> put;
};

class GradientStrategy {
 public:
  GradientStrategy(FlatParams& flat, Communicator& comm, const ReducerOptions& options);
  virtual ~GradientStrategy() = default;

  virtual void begin_backward(bool reduce) = 0;
  virtual void on_gradient(int param) = 0;  // its gradient was just accumulated
  virtual void fill_missing(int bucket) = 0;  // bucket b's parameters without a gradient: zeros
  virtual PendingReduction launch(int bucket) = 0;
  virtual void end_backward() = 0;  // every reduction of the micro-step has finished
  virtual at::Tensor owned_gradients() = 0;  // see GradReducer::owned_gradients (undefined: on NVMe)
  virtual void zero() = 0;
  virtual int64_t gradient_bytes() const = 0;
  virtual int64_t bucket_bytes() const { return 0; }

 protected:
  // Prescales `grads` in place and returns what goes on the wire (a converted copy or `grads`).
  at::Tensor to_wire(const at::Tensor& grads) const;
  CollectiveOptions collective() const { return {.async = options_.overlap}; }
  CollectiveOptions scatter() const { return {.async = options_.overlap, .quantize_bits = options_.quantize_bits}; }
  FlatParams& flat_;
  Communicator& comm_;
  ReducerOptions options_;
  int rank_;  // the shard this rank owns (0 with one partition)
};

}  // namespace zero::engine
