// The engine's side of zero::Init (include/zero/init.h): finding the units built partitioned,
// checking they fit this engine, and comparing them across ranks.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "zero/communicator.h"
#include "zero/config.h"
#include "zero/unit.h"

namespace zero::engine {

struct PartitionedUnits {
  std::vector<std::pair<std::string, const UnitBase*>> units;  // by module name, in module order
  std::unordered_set<const void*> params;                     // their sharded parameters (TensorImpl)
  bool contains(const at::Tensor& p) const { return params.count(p.unsafeGetTensorImpl()) > 0; }
};

PartitionedUnits find_partitioned_units(torch::nn::Module& model);

// DeepSpeed's persistence thresholds, the one place they are applied (the engine and zero::Init
// both ask): a parameter of at most stage3_param_persistence_threshold elements stays whole on
// every rank while the total kept whole stays within stage3_model_persistence_threshold. True
// (and `persisted` grows by numel) when this one stays whole.
bool stays_whole(const ZeroConfig& zero, int64_t& persisted, int64_t numel);

// The dtype a model trains in: bf16 or fp16 from the config, else the model's own (`declared`).
at::ScalarType training_dtype(const Config& config, at::ScalarType declared);

// Collective. Errors (on every rank alike) when a unit was partitioned for another world size or
// dtype than the engine's, or when ranks built a unit with different values (one all-reduce;
// the message names the first such unit and the ranks that differ from rank 0).
void verify_partitioned_units(const PartitionedUnits& found, Communicator& comm, at::ScalarType dtype);

}  // namespace zero::engine
