// Where each of the engine's parameters sits in the whole parameter under tensor parallelism
// (zero/tensor_parallel.h): the dimension its members' slices split it along, where this member's
// slice starts and the whole size. Checkpoints name slices by it; the gradient norm counts the
// parameters every member holds whole once.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "zero/engine.h"

namespace zero::engine {

struct ParameterSlice {
  int dim = -1;                  // -1: the whole parameter, alike on every member
  int64_t start = 0, whole = 0;  // along dim: where this slice starts, the whole parameter's size
};

// Collective over the tensor-parallel group (when `options` has one of more than one member):
// every member's size along each parameter's dimension, gathered. Without one, every parameter
// is whole. Throws naming the parameter when split_dim names a dimension it does not have.
std::vector<ParameterSlice> slice_parameters(const std::vector<at::Tensor>& params, const std::vector<std::string>& names,
                                             const ModelParallelOptions& options, int rank);

}  // namespace zero::engine
