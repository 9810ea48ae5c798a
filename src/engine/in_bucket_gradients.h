// InBucketGradients — stages 0/1: gradients accumulate in whole bucket buffers (gradient_strategy.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "engine/gradient_strategy.h"

namespace zero::engine {

class InBucketGradients : public GradientStrategy {
 public:
  InBucketGradients(FlatParams& flat, Communicator& comm, const ReducerOptions& options);
  void begin_backward(bool reduce) override;
  void on_gradient(int) override {}
  void fill_missing(int) override {}  // a gradient that never came is the buffer's zeros
  PendingReduction launch(int bucket) override;
  void end_backward() override {}
  at::Tensor owned_gradients() override;
  void zero() override;
  int64_t gradient_bytes() const override;

 private:
  void attach_gradient_views();
  at::Tensor whole_;                 // every bucket's gradients, model dtype, laid out as FlatParams::whole
  std::vector<at::Tensor> buckets_;  // views of whole_
};

}  // namespace zero::engine
