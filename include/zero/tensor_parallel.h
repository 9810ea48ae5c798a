// Tensor parallelism beside ZeRO (Megatron's layout, DeepSpeed's AutoTP training;
// docs/tensor_parallel.md).
//
//   zero::ParallelGrid grid(world, config.tensor_parallel.size);
//   Model model(..., grid.layer_communicator());       // each rank builds its slices of the layers
//   zero::Engine engine(model, config, grid.data_parallel(), {},
//                       {.group = &grid.tensor_parallel(), .split_dim = dim_of});
//
// A column-parallel layer keeps a slice of the output features, a row-parallel one a slice of the
// input features. Between them the activation is split along the features; before the pair it is
// whole on every member (copy_to_tensor_parallel: its gradients are summed over the group), after
// it the members' partial sums are added (reduce_from_tensor_parallel). ZeRO then partitions each
// rank's slices over its data-parallel group.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>

#include <memory>

#include "zero/comm_stats.h"
#include "zero/world.h"

namespace zero {

class Communicator;

// The world as a grid: tensor-parallel groups of `tensor_parallel` consecutive ranks (on one host
// when each host runs a multiple of that many ranks: their all-reduces come once per layer), and
// data-parallel groups of the ranks with the same place in their tensor-parallel group.
class ParallelGrid {
 public:
  // Collective over `world`. Throws naming both numbers when `tensor_parallel` does not divide
  // the world size; warns (on stderr, from rank 0) naming the hosts when a group spans several.
  ParallelGrid(World& world, int tensor_parallel);
  World& tensor_parallel() { return tensor_parallel_; }
  World& data_parallel() { return data_parallel_; }
  // The tensor-parallel group's collectives as the model's layers make them, counted (the
  // all-reduces of Megatron's operators: their bytes per step are exact, docs/tensor_parallel.md).
  Communicator& layer_communicator() { return *layer_communicator_; }
  const CommStats& layer_stats() const { return *layer_stats_; }
  CommStats& layer_stats() { return *layer_stats_; }
  // Hosts of tensor-parallel groups that span several ("" when none does), for the warning.
  const std::string& spanning_hosts() const { return spanning_hosts_; }

 private:
  World tensor_parallel_, data_parallel_;
  std::shared_ptr<CommStats> layer_stats_ = std::make_shared<CommStats>();
  std::unique_ptr<CountingCommunicator> layer_communicator_;
  std::string spanning_hosts_;
};

// `n` split into `parts` near-equal slices (the first n % parts are one longer): slice `index`.
struct SliceRange {
  int64_t start = 0, length = 0;
};
SliceRange slice_range(int64_t n, int index, int parts);

// Megatron's conjugate operators over the tensor-parallel group, as autograd functions.
// Identity forward; the gradient summed over the group backward (where a whole activation enters
// column-parallel layers).
at::Tensor copy_to_tensor_parallel(const at::Tensor& x, Communicator& group);
// Summed over the group forward; identity backward (where row-parallel layers' partial sums leave).
at::Tensor reduce_from_tensor_parallel(const at::Tensor& x, Communicator& group);

// Megatron's sequence parallelism: outside the tensor-parallel regions the activation [B, T, H] is
// split along the sequence, T/n rows of it on each member (the norms and the residual stream hold
// 1/n of the tokens). All-gathered along T forward, reduce-scattered backward (where a region
// begins) ...
at::Tensor gather_from_sequence_parallel(const at::Tensor& x, Communicator& group);
// ... and the partial sums reduce-scattered along T forward, all-gathered backward (where it ends).
at::Tensor reduce_scatter_to_sequence_parallel(const at::Tensor& x, Communicator& group);

// The embedding of `tokens` through a slice of the vocabulary (rows vocab_start.. of the table on
// this rank): tokens outside the slice give zeros here and their row on the rank that holds it,
// summed over the group (and split along the sequence with `sequence_parallel`). `padding_idx`
// (< 0: none) gets no gradient, as torch's embedding.
at::Tensor vocab_parallel_embedding(const at::Tensor& tokens, const at::Tensor& weight_slice, int64_t vocab_start,
                                    Communicator& group, int64_t padding_idx = -1, bool sequence_parallel = false);

// Cross-entropy of logits split along the vocabulary: each rank holds [N, V/tp] whose first column
// is token vocab_start. Never gathers the full logits: the maximum, the sum of exponentials and the
// target's logit are reduced over the group as [N] vectors. In fp32; targets equal to
// `ignore_index` add nothing. `mean`: divided by the number of targets that count (torch's
// cross_entropy), else their sum.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab_start,
                                        Communicator& group, bool mean, int64_t ignore_index = -100);

}  // namespace zero
