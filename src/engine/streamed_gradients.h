// StreamedGradients — stages 2/3: gradients streamed through pooled buffers into owned fp32
// shards (gradient_strategy.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "engine/gradient_strategy.h"
#include "engine/reduction_launcher.h"

namespace zero::engine {

class StreamedGradients : public GradientStrategy {
 public:
  // `launcher`: the pool waits on its oldest reduction rather than grow past two buffers.
  // `home`: where the owned gradients accumulate (the partition's).
  StreamedGradients(FlatParams& flat, Communicator& comm, const ReducerOptions& options, ReductionLauncher& launcher,
                    GradientHome home);
  void begin_backward(bool reduce) override;
  void on_gradient(int param) override;
  void fill_missing(int bucket) override;
  PendingReduction launch(int bucket) override;
  void end_backward() override;
  at::Tensor owned_gradients() override;
  void zero() override;
  int64_t gradient_bytes() const override;
  int64_t bucket_bytes() const override { return pool_bytes_; }

 private:
  at::Tensor acquire_bucket(int b);
  void release_bucket(int b);
  ReductionLauncher& launcher_;
  at::Tensor accumulator_;  // owned shards, fp32 (the partition's); undefined when put_ takes them
  std::function<void(int64_t, const at::Tensor&, bool)> put_;
  // zero() was called and no reduction has landed since: the accumulator's contents are garbage
  // that the next reducing micro-step overwrites (first_since_zero_: this one does).
  bool stale_ = false, first_since_zero_ = false;
  std::vector<char> arrived_;             // gradient received this micro-step, per param
  std::vector<at::Tensor> staged_;        // the bucket buffer in use, per bucket
  std::vector<at::Tensor> staged_whole_;  // the pool buffer behind each staged_ view
  std::vector<at::Tensor> pool_;          // free bucket buffers
  int64_t pool_bytes_ = 0;
  int pool_buffers_ = 0;
};

}  // namespace zero::engine
