// zero::checkpointing::checkpoint — activation checkpointing (DeepSpeed's
// deepspeed.checkpointing.checkpoint) (torch.utils.checkpoint, which LibTorch's C++ API
// lacks): run a block's forward without keeping its intermediate activations, keep only its
// inputs, and run the forward again during backward to get them back.
//
//   namespace ckpt = zero::checkpointing;
//   x = ckpt::checkpoint([block](const std::vector<at::Tensor>& in) { return std::vector{block->forward(in[0])}; }, {x})[0];
//   x = ckpt::checkpoint([block](const at::Tensor& in) { return block->forward(in); }, x);
//
// The callable is kept until backward: capture what it uses by value.
//
// The first run is under no_grad; its outputs get one autograd node whose backward restores the
// CPU random state the first run saw (so dropout draws the same masks), runs the callable again
// with grad on over the saved inputs, and back-propagates through it (a reentrant backward: the
// block's parameters get their gradients there, and the engine's hooks see them as usual). At
// stage 3 a zero::Unit inside the callable gathers its parameters again for the recomputation.
//
// Inputs may or may not require grad; outputs are every tensor the callable returns (those that
// are not floating point, or that the block computes without grad, get none). The recomputation
// must give what the first run gave: each output's bytes are hashed (XXH3) on the first run and
// compared after the second, and a difference is a zero::Error naming the checkpoint — a block
// whose forward depends on state that changed between the two (a random generator other than
// the CPU default one, a module flag, a mutated input) is caught, not silently wrong. An input
// changed in place before the backward is an error too.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace zero {
class Communicator;
}

namespace zero::checkpointing {

using CheckpointFunction = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// `name`: how errors and the profile name this checkpoint (e.g. "h3"). `partition_over`: see above
// (null or a group of one: the inputs are kept whole).
std::vector<at::Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<at::Tensor>& inputs,
                                   const std::string& name = "checkpoint", Communicator* partition_over = nullptr);
at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& input,
                      const std::string& name = "checkpoint", Communicator* partition_over = nullptr);

// Runs `blocks` (shared pointers to modules, or zero::Units, with forward(Tensor)) in order on
// `x`: blocks 0, every, 2·every, ... under checkpoint, named "h<index>" (every 0: none), their
// inputs partitioned over `partition_over` when given.
template <class Blocks>
at::Tensor run_blocks(const Blocks& blocks, at::Tensor x, int64_t every, Communicator* partition_over = nullptr) {
  for (size_t l = 0; l < blocks.size(); ++l) {
    auto block = blocks[l];
    if (every > 0 && static_cast<int64_t>(l) % every == 0) {
      x = checkpoint([block](const at::Tensor& in) { return block->forward(in); }, x, "h" + std::to_string(l),
                     partition_over);
    } else {
      x = block->forward(x);
    }
  }
  return x;
}

// Counts since the process started (tests, zero-train's report): forwards run under checkpoint,
// and recomputations done in backward.
struct CheckpointCounts {
  int64_t forwards = 0, recomputations = 0;
};
CheckpointCounts counts();

// activation_checkpointing.profile: per checkpoint name, the time of its forwards, of its
// recomputations and of the backward through them (seconds, summed), while profiling is on (the
// engine turns it on from the config; process-wide).
struct CheckpointProfile {
  std::string name;
  int64_t calls = 0;
  double forward_seconds = 0, recompute_seconds = 0, backward_seconds = 0;
};
void set_profiling(bool on);
std::vector<CheckpointProfile> profile();  // in the order the names first ran
void reset_profile();

// activation_checkpointing.contiguous_memory_optimization (the engine sets it from its config;
// process-wide, and setting it starts the counts afresh): each input a checkpoint keeps (this
// member's piece with partition_activations) is copied into a slot of one preallocated buffer,
// held until the checkpoint's backward has run. The buffer sizes itself in the first step — when
// it grows, it is allocated again at exactly the most slots held at once when they are all let go
// — and later steps allocate nothing (src/engine/contiguous_activations.h).
void set_contiguous(bool on);
struct ContiguousBufferStats {
  int64_t bytes = 0, slots = 0, slot_bytes = 0;  // the buffer now
  int64_t held = 0, peak_held = 0;               // slots held now, and at most at once
  int64_t allocations = 0;                       // buffers allocated since it was set
};
ContiguousBufferStats contiguous_buffer_stats();

namespace detail {
// True while a checkpoint's forward runs again in backward (stage 3 keeps a unit gathered for
// the backward that follows at once, instead of freeing it and gathering it again).
bool recomputing();
}  // namespace detail

}  // namespace zero::checkpointing
