// One training step of the small transformer through an engine, as the distributed tests run it.
#pragma once

#include <torch/torch.h>

#include "dist_test_world.h"
#include "models/tiny/tiny_transformer.h"
#include "zero/engine.h"

// Step `step` on this rank's `micro` rows of tiny_batch(24, o, 500 + step): the loss averaged
// over the ranks.
inline double tiny_step(zero::Engine& engine, zero::models::TinyTransformer& model, int64_t micro, int step) {
  auto [tokens, targets] = zero::models::tiny_batch(24, model.options, 500 + step);
  const int64_t first = test_world().rank() * micro;
  at::Tensor loss =
      engine.forward([&] { return model.loss(tokens.narrow(0, first, micro), targets.narrow(0, first, micro)); });
  engine.backward(loss);
  engine.step();
  at::Tensor mean = torch::full({1}, loss.item<double>(), torch::kDouble);
  test_world().communicator().all_reduce(mean, zero::ReduceOp::kAvg, {.async = false});
  return mean.item<double>();
}
