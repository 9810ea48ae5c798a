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

class PipelineLink;

// The world as a grid: tensor-parallel groups of `tensor_parallel` consecutive ranks (on one host
// when each host runs a multiple of that many ranks: their all-reduces come once per layer), and
// data-parallel groups of the ranks with the same place in their tensor-parallel group. With
// pipeline stages, Megatron's order: rank = (stage × data-parallel + data-parallel rank) ×
// tensor-parallel + tensor-parallel rank — each stage a block of consecutive ranks.
class ParallelGrid {
 public:
  // Collective over `world`. Throws naming the numbers when the sizes do not divide the world
  // size; warns (on stderr, from rank 0) naming the hosts when a tensor-parallel group spans several.
  ParallelGrid(World& world, int tensor_parallel, int pipeline_stages = 1);
  ~ParallelGrid();
  World& tensor_parallel() { return tensor_parallel_; }
  World& data_parallel() { return data_parallel_; }
  // One rank per stage, at this rank's data- and tensor-parallel place; its rank is the stage.
  World& pipeline() { return pipeline_; }
  int stage() const { return pipeline_.rank(); }
  int stages() const { return pipeline_.size(); }
  // Point to point with the neighbouring stages at this rank's place (null where there is none):
  // activations forward, their gradients backward.
  PipelineLink* activations_in() { return activations_in_.get(); }
  PipelineLink* activations_out() { return activations_out_.get(); }
  PipelineLink* gradients_in() { return gradients_in_.get(); }
  PipelineLink* gradients_out() { return gradients_out_.get(); }
  // The first and the last stage at this rank's place (Megatron's embedding group, for tied
  // embeddings); null on the stages between, and with one stage.
  World* first_and_last() { return first_and_last_.get(); }
  // The tensor-parallel group's collectives as the model's layers make them, counted (the
  // all-reduces of Megatron's operators: their bytes per step are exact, docs/tensor_parallel.md).
  Communicator& layer_communicator() { return *layer_communicator_; }
  const CommStats& layer_stats() const { return *layer_stats_; }
  CommStats& layer_stats() { return *layer_stats_; }
  // Hosts of tensor-parallel groups that span several ("" when none does), for the warning.
  const std::string& spanning_hosts() const { return spanning_hosts_; }

 private:
  void connect_stages(World& world);
  World tensor_parallel_, data_parallel_, pipeline_;
  std::unique_ptr<PipelineLink> activations_in_, activations_out_, gradients_in_, gradients_out_;
  std::unique_ptr<World> first_and_last_;
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
// `whole` (the same on every member) as this member's piece of it: the flattened tensor cut into
// n pieces of ceil(numel / n) elements, the last padded with zeros (partition_activations, the
// pipeline's pipe_partitioned) ...
at::Tensor piece_of(const at::Tensor& whole, Communicator& group);
// ... and the whole of `shape` back from every member's piece, all-gathered over the group.
at::Tensor whole_from_pieces(const at::Tensor& piece, at::IntArrayRef shape, Communicator& group);

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab_start,
                                        Communicator& group, bool mean, int64_t ignore_index = -100);

}  // namespace zero
