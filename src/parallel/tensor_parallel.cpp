#include "zero/tensor_parallel.h"

#include <fmt/core.h>
#include <torch/torch.h>

#include <cstdio>
#include <limits>
#include <set>

#include "zero/communicator.h"
#include "zero/pipeline.h"
#include "zero/error.h"

namespace zero {

namespace {

// The sizes, checked before any rank splits the world (every rank throws alike).
int checked_group_size(const World& world, int tensor_parallel, int pipeline_stages) {
  if (pipeline_stages < 1 || world.size() % pipeline_stages != 0) {
    throw Error(fmt::format("pipeline_parallel.pp_size: {} stages do not divide the world size {}", pipeline_stages,
                            world.size()),
                "pipeline_parallel.pp_size", world.rank());
  }
  if (tensor_parallel < 1 || world.size() / pipeline_stages % tensor_parallel != 0) {
    throw Error(fmt::format("tensor_parallel.autotp_size {} does not divide the world size {}{}", tensor_parallel,
                            world.size(),
                            pipeline_stages > 1 ? fmt::format(" over {} pipeline stages", pipeline_stages) : ""),
                "tensor_parallel.autotp_size", world.rank());
  }
  return tensor_parallel;
}

// This rank's group in each dimension (Megatron's order: tensor-parallel innermost, then
// data-parallel, then the stages).
struct Place {
  int block, stage, place;  // ranks per stage; this rank's stage; its place within the stage
};
Place place_of(const World& world, int stages) {
  const int block = world.size() / stages;
  return {block, world.rank() / block, world.rank() % block};
}

}  // namespace

ParallelGrid::ParallelGrid(World& world, int tensor_parallel, int pipeline_stages)
    : tensor_parallel_(world.split(world.rank() / checked_group_size(world, tensor_parallel, pipeline_stages))),
      data_parallel_(world.split(place_of(world, pipeline_stages).stage * tensor_parallel + world.rank() % tensor_parallel)),
      pipeline_(world.split(place_of(world, pipeline_stages).place)),
      layer_communicator_(std::make_unique<CountingCommunicator>(tensor_parallel_.communicator(), layer_stats_)) {
  connect_stages(world);
  std::set<std::string> spanning;
  for (int first = 0; first < world.size(); first += tensor_parallel) {
    for (int r = first + 1; r < first + tensor_parallel; ++r) {
      if (world.node_of(r) == world.node_of(first)) continue;
      spanning.insert(world.host(first));
      spanning.insert(world.host(r));
    }
  }
  for (const std::string& host : spanning) spanning_hosts_ += (spanning_hosts_.empty() ? "" : ", ") + host;
  if (!spanning_hosts_.empty() && world.rank() == 0) {
    std::fprintf(stderr,
                 "zerocpp: warning: tensor-parallel groups of %d ranks span hosts (%s): their all-reduces, two per "
                 "layer each way, cross the network\n",
                 tensor_parallel, spanning_hosts_.c_str());
  }
}

ParallelGrid::~ParallelGrid() = default;

void ParallelGrid::connect_stages(World& world) {
  const int stages = pipeline_.size();
  if (stages == 1) return;
  const Place p = place_of(world, stages);
  const int alone = world.size() + world.rank();  // a color no other rank passes
  // A link's sends must start at once and return (a stage sends and goes on to receive), so no
  // consistency check (a collective of its own) and no cap on what is in flight.
  CommunicatorOptions link_options;
  link_options.check_consistency = false;
  link_options.pieces_in_flight = std::numeric_limits<int>::max();
  // Each pair of neighbouring stages (s, s + 1) at one place gets two Worlds of its two ranks, one
  // per direction: pairs from even stages first, then from odd ones (every rank splits alike).
  for (int parity : {0, 1}) {
    const int lower = p.stage % 2 == parity ? p.stage : p.stage - 1;
    const bool paired = lower >= 0 && lower + 1 < stages;
    const int color = paired ? lower * p.block + p.place : alone;
    World activations = world.split(color, &link_options), gradients = world.split(color, &link_options);
    if (!paired) continue;
    // In each pair the lower stage is rank 0 (stages are blocks of consecutive ranks).
    if (lower == p.stage) {
      activations_out_ = std::make_unique<PipelineLink>(std::move(activations), 0);
      gradients_in_ = std::make_unique<PipelineLink>(std::move(gradients), 1);
    } else {
      activations_in_ = std::make_unique<PipelineLink>(std::move(activations), 0);
      gradients_out_ = std::make_unique<PipelineLink>(std::move(gradients), 1);
    }
  }
  const bool end = p.stage == 0 || p.stage == stages - 1;
  World ends = world.split(end ? p.place : alone);
  if (end) first_and_last_ = std::make_unique<World>(std::move(ends));
}

at::Tensor piece_of(const at::Tensor& whole, Communicator& group) {
  const at::Tensor flat = whole.reshape(-1);
  const int64_t members = group.size(), numel = flat.numel();
  const int64_t length = (numel + members - 1) / members;
  const int64_t start = std::min(numel, length * group.rank()), have = std::min(length, numel - start);
  at::Tensor piece = at::zeros({length}, flat.options());
  piece.narrow(0, 0, have).copy_(flat.narrow(0, start, have));
  return piece;
}

at::Tensor whole_from_pieces(const at::Tensor& piece, at::IntArrayRef shape, Communicator& group) {
  at::Tensor gathered = at::empty({piece.numel() * group.size()}, piece.options());
  group.all_gather(piece, gathered, {.async = false});
  return gathered.narrow(0, 0, c10::multiply_integers(shape)).view(shape);
}

SliceRange slice_range(int64_t n, int index, int parts) {
  const int64_t base = n / parts, extra = n % parts;
  return {index * base + std::min<int64_t>(index, extra), base + (index < extra ? 1 : 0)};
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor summed(const at::Tensor& x, Communicator& group) {
  at::Tensor out = x.contiguous().clone();  // never the caller's (or autograd's) buffer
  group.all_reduce(out, ReduceOp::kSum, {.async = false});
  return out;
}

at::Tensor same(const at::Tensor& x, Communicator&) { return x.view_as(x); }  // a new node's output

// Along the sequence (dimension 1 of [B, T, H]): the collectives cut their buffers into
// contiguous chunks, so the sequence goes first while they run (Megatron's [T, B, H] layout).
at::Tensor all_gathered_sequence(const at::Tensor& x, Communicator& group) {
  const at::Tensor local = x.transpose(0, 1).contiguous();
  std::vector<int64_t> shape = local.sizes().vec();
  shape[0] *= group.size();
  at::Tensor out = at::empty(shape, local.options());
  group.all_gather(local, out, {.async = false});
  return out.transpose(0, 1);
}

at::Tensor reduce_scattered_sequence(const at::Tensor& x, Communicator& group) {
  const at::Tensor whole = x.transpose(0, 1).contiguous();
  std::vector<int64_t> shape = whole.sizes().vec();
  shape[0] /= group.size();
  at::Tensor out = at::empty(shape, whole.options());
  group.reduce_scatter(whole, out, ReduceOp::kSum, {.async = false});
  return out.transpose(0, 1);
}

// Megatron's operators are pairs: a collective (or nothing) forward and its conjugate backward.
// The group travels through the autograd context as an address: the layers that call these
// operators hold the grid, which outlives every forward and backward.
template <at::Tensor (*Forward)(const at::Tensor&, Communicator&), at::Tensor (*Backward)(const at::Tensor&, Communicator&)>
struct Conjugate : torch::autograd::Function<Conjugate<Forward, Backward>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return Forward(x, *reinterpret_cast<Communicator*>(group));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator& group = *reinterpret_cast<Communicator*>(ctx->saved_data["group"].toInt());
    return {Backward(grads[0], group), at::Tensor()};
  }
};

using CopyToTensorParallel = Conjugate<same, summed>;
using ReduceFromTensorParallel = Conjugate<summed, same>;
using GatherFromSequenceParallel = Conjugate<all_gathered_sequence, reduce_scattered_sequence>;
using ReduceScatterToSequenceParallel = Conjugate<reduce_scattered_sequence, all_gathered_sequence>;

int64_t address(Communicator& group) { return reinterpret_cast<int64_t>(&group); }

}  // namespace

at::Tensor copy_to_tensor_parallel(const at::Tensor& x, Communicator& group) {
  if (group.size() == 1) return x;
  return CopyToTensorParallel::apply(x, address(group));
}

at::Tensor reduce_from_tensor_parallel(const at::Tensor& x, Communicator& group) {
  if (group.size() == 1) return x;
  return ReduceFromTensorParallel::apply(x, address(group));
}

at::Tensor gather_from_sequence_parallel(const at::Tensor& x, Communicator& group) {
  if (group.size() == 1) return x;
  return GatherFromSequenceParallel::apply(x, address(group));
}

at::Tensor reduce_scatter_to_sequence_parallel(const at::Tensor& x, Communicator& group) {
  if (group.size() == 1) return x;
  if (x.size(1) % group.size() != 0) {
    throw Error(fmt::format("sequence parallelism: a sequence of {} tokens does not split over {} ranks", x.size(1),
                            group.size()),
                "sequence_parallel");
  }
  return ReduceScatterToSequenceParallel::apply(x, address(group));
}

at::Tensor vocab_parallel_embedding(const at::Tensor& tokens, const at::Tensor& weight_slice, int64_t vocab_start,
                                    Communicator& group, int64_t padding_idx, bool sequence_parallel) {
  namespace F = torch::nn::functional;
  const int64_t rows = weight_slice.size(0);
  const at::Tensor outside = (tokens < vocab_start) | (tokens >= vocab_start + rows);
  const at::Tensor local = (tokens - vocab_start).masked_fill(outside, 0);
  F::EmbeddingFuncOptions lookup;
  if (padding_idx >= vocab_start && padding_idx < vocab_start + rows) lookup.padding_idx(padding_idx - vocab_start);
  const at::Tensor mine = F::embedding(local, weight_slice, lookup).masked_fill(outside.unsqueeze(-1), 0);
  return sequence_parallel ? reduce_scatter_to_sequence_parallel(mine, group) : reduce_from_tensor_parallel(mine, group);
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab_start,
                                        Communicator& group, bool mean, int64_t ignore_index) {
  const at::Tensor x = logits.to(at::kFloat);  // [N, V/tp]
  const int64_t columns = x.size(1);
  // The softmax's shift: the row's maximum over the whole vocabulary. It cancels out of the loss,
  // so no gradient flows through it.
  at::Tensor shift = std::get<0>(x.detach().max(-1)).contiguous();
  if (group.size() > 1) group.all_reduce(shift, ReduceOp::kMax, {.async = false});
  const at::Tensor shifted = x - shift.unsqueeze(1);
  const at::Tensor sum_exp = reduce_from_tensor_parallel(shifted.exp().sum(-1), group);
  const at::Tensor counts = targets != ignore_index;
  const at::Tensor outside = (targets < vocab_start) | (targets >= vocab_start + columns) | counts.logical_not();
  const at::Tensor column = (targets - vocab_start).masked_fill(outside, 0);
  const at::Tensor picked = shifted.gather(1, column.unsqueeze(1)).squeeze(1).masked_fill(outside, 0);
  const at::Tensor target_logit = reduce_from_tensor_parallel(picked, group);
  // -log softmax at the target: log(Σ exp(x - max)) - (x_target - max).
  const at::Tensor losses = (sum_exp.log() - target_logit).masked_fill(counts.logical_not(), 0);
  const at::Tensor total = losses.sum();
  return mean ? total / counts.sum().to(at::kFloat) : total;
}

}  // namespace zero
