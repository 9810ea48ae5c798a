// Pipeline parallelism beside ZeRO (DeepSpeed's pipeline engine, Megatron's non-interleaved
// schedule; docs/pipeline_parallel.md).
//
//   zero::ParallelGrid grid(world, tensor_parallel, stages);   // zero/tensor_parallel.h
//   (models/common/pipeline_stages.h: which layers each stage holds)
//   ... build this rank's stage of the model, an Engine over grid.data_parallel() ...
//   double loss = zero::pipeline::train_step(grid, engine, micro_batches, stage_work, options);
//
// A step's micro-batches go through the stages by 1F1B: each stage runs forwards until it holds
// as many as there are stages after it, then one forward and one backward by turns, then the
// backwards left. Activations go to the next stage and their gradients come back point to point.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "zero/world.h"

namespace zero {

class Communicator;
struct Config;
class Engine;
class ParallelGrid;
class Work;

// One direction between two neighbouring stages: a World of their two ranks, over which the
// sender broadcasts (MPI's point to point underneath). A send returns at once — a stage sends its
// activation and goes on to receive a gradient, as Megatron's batched send and receive do — and
// its tensor is kept until it completes; sends complete in order.
class PipelineLink {
 public:
  PipelineLink(World pair, int sender);
  ~PipelineLink();
  void send(const at::Tensor& tensor);                                  // from the sender
  at::Tensor receive(at::IntArrayRef shape, at::ScalarType dtype);      // on the other rank; waits
  void wait_sent();                                                     // every send so far is complete
  int64_t bytes_sent() const { return sent_; }
  int64_t bytes_received() const { return received_; }
  World& pair() { return pair_; }

 private:
  World pair_;
  int sender_;
  std::deque<std::pair<std::shared_ptr<Work>, at::Tensor>> in_flight_;
  int64_t sent_ = 0, received_ = 0;
};

namespace pipeline {

// This stage's part of a step.
struct StageWork {
  // Micro-batch `micro`'s forward on this stage: `received` is the previous stage's activation
  // (undefined on the first stage); returns the activation for the next stage, or on the last
  // stage the micro-batch's loss.
  std::function<at::Tensor(int64_t micro, const at::Tensor& received)> forward;
  // What passes between the stages on this rank for micro-batch `micro` (the rows and tokens of
  // micro-batches may differ: zero-finetune pads each to its longest row).
  std::function<std::vector<int64_t>(int64_t micro)> activation_shape;
  at::ScalarType activation_dtype = at::kFloat;
  // Tied embeddings (Megatron's embedding group): on the first stage the embedding parameter, on
  // the last its copy, which the lm_head uses (a leaf outside the engine). The copy's gradients go
  // to the first stage, into the parameter's, before its last backward of the step, and the
  // parameter comes to the copy before each step's (and evaluation's) first forward. Undefined: none.
  at::Tensor tied;
};

struct StepOptions {
  int64_t micro_batches = 1;  // the step's gradient_accumulation_steps
  // The tensor-parallel group, when the activations (their gradients) are the same on its members:
  // each member sends 1/TP of one and the receiver all-gathers it (DeepSpeed's pipe_partitioned
  // and grad_partitioned). Null: sent whole.
  Communicator* partition_activations_over = nullptr;
  Communicator* partition_gradients_over = nullptr;
};

// A step as the config asks: its gradient_accumulation_steps micro-batches, and with tensor
// parallelism (not sequence-parallel: then each member's activation is its own shard)
// pipeline.pipe_partitioned / grad_partitioned over the grid's tensor-parallel group.
StepOptions step_options(ParallelGrid& grid, const Config& config);

// The bytes this rank sent and received point to point to its neighbouring stages (activations
// and their gradients; a tied embedding's weight and gradients go between the first and last
// stages apart), since the grid was made.
struct PipelineBytes {
  int64_t sent = 0, received = 0;
};
PipelineBytes pipeline_bytes(ParallelGrid& grid);

// One optimizer step of 1F1B over `options.micro_batches` micro-batches, `engine` being this
// stage's (over grid.data_parallel(), with grid.pipeline() for the gradient norm). Returns the sum
// of the micro-batches' losses, on every stage.
double train_step(ParallelGrid& grid, Engine& engine, const StageWork& work, const StepOptions& options);

// Forward only (evaluation, under the caller's no-grad guard): `options.micro_batches` through the
// stages in order, each stage sending on as soon as it has run one. Returns the sum of the last
// stage's outputs (the losses), on every stage.
double evaluate(ParallelGrid& grid, Engine& engine, const StageWork& work, const StepOptions& options);

}  // namespace pipeline
}  // namespace zero
