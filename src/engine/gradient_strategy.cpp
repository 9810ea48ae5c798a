#include "engine/gradient_strategy.h"

#include <ATen/ATen.h>

#include "zero/error.h"

namespace zero::engine {

GradientStrategy::GradientStrategy(FlatParams& flat, Communicator& comm, const ReducerOptions& options)
    : flat_(flat), comm_(comm), options_(options), rank_(flat.layout().owned_shard(comm.rank())) {}

at::Tensor GradientStrategy::to_wire(const at::Tensor& grads) const {
  if (options_.prescale) grads.mul_(1.0 / options_.predivide_factor);
  // communication_data_type: reduce a converted copy, and bring the result back afterwards.
  const bool convert = options_.wire_dtype && *options_.wire_dtype != grads.scalar_type();
  return convert ? grads.to(*options_.wire_dtype) : grads;
}

}  // namespace zero::engine
