// Pipeline parallelism (include/zero/pipeline.h): the links between stages and the 1F1B schedule
// of one step.
#include "zero/pipeline.h"

#include <ATen/ATen.h>
#include <fmt/core.h>

#include <algorithm>

#include "zero/communicator.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/tensor_parallel.h"

namespace zero {

PipelineLink::PipelineLink(World pair, int sender) : pair_(std::move(pair)), sender_(sender) {}

PipelineLink::~PipelineLink() {
  try {
    wait_sent();
  } catch (...) {  // a peer gone: the error was (or will be) raised where it is waited for
  }
}

void PipelineLink::send(const at::Tensor& tensor) {
  const at::Tensor message = tensor.contiguous();
  in_flight_.emplace_back(pair_.communicator().broadcast(message, sender_, {.async = true}), message);
  sent_ += static_cast<int64_t>(message.nbytes());
  // Completed sends give their tensors back (in order: a later one cannot finish first).
  while (!in_flight_.empty() && in_flight_.front().first->test()) in_flight_.pop_front();
}

at::Tensor PipelineLink::receive(at::IntArrayRef shape, at::ScalarType dtype) {
  at::Tensor message = at::empty(shape, at::TensorOptions().dtype(dtype));
  // Asynchronous and waited for: MPI matches the sender's non-blocking broadcast only with another.
  pair_.communicator().broadcast(message, sender_, {.async = true})->wait();
  received_ += static_cast<int64_t>(message.nbytes());
  return message;
}

void PipelineLink::wait_sent() {
  while (!in_flight_.empty()) {
    in_flight_.front().first->wait();
    in_flight_.pop_front();
  }
}

namespace pipeline {
StepOptions step_options(ParallelGrid& grid, const Config& config) {
  StepOptions options{.micro_batches = config.gradient_accumulation_steps};
  if (config.tensor_parallel.size > 1 && !config.tensor_parallel.sequence_parallel) {
    if (config.pipeline.pipe_partitioned) options.partition_activations_over = &grid.layer_communicator();
    if (config.pipeline.grad_partitioned) options.partition_gradients_over = &grid.layer_communicator();
  }
  return options;
}

PipelineBytes pipeline_bytes(ParallelGrid& grid) {
  PipelineBytes bytes;
  for (PipelineLink* link : {grid.activations_in(), grid.activations_out(), grid.gradients_in(), grid.gradients_out()}) {
    if (!link) continue;
    bytes.sent += link->bytes_sent();
    bytes.received += link->bytes_received();
  }
  return bytes;
}

namespace {

// An activation or a gradient, whole or as this member's piece of it (pipe_partitioned,
// grad_partitioned: the receiver all-gathers the pieces over its tensor-parallel group).
void send_whole_or_piece(PipelineLink& link, const at::Tensor& whole, Communicator* over) {
  link.send(over && over->size() > 1 ? piece_of(whole.detach(), *over) : whole.detach());
}

at::Tensor receive_whole_or_piece(PipelineLink& link, const std::vector<int64_t>& shape, at::ScalarType dtype,
                                  Communicator* over) {
  if (!over || over->size() == 1) return link.receive(shape, dtype);
  const int64_t numel = c10::multiply_integers(shape), members = over->size();
  const at::Tensor piece = link.receive({(numel + members - 1) / members}, dtype);
  return whole_from_pieces(piece, shape, *over);
}

// Tied embeddings: the copy on the last stage takes the first stage's weight (as trained by the
// last step, or loaded) before a step's or an evaluation's first forward. Whether there is one.
bool share_tied_weight(ParallelGrid& grid, const StageWork& work) {
  World* ends = grid.first_and_last();
  if (!work.tied.defined() || ends == nullptr) return false;
  const bool first = grid.stage() == 0, last = grid.stage() == grid.stages() - 1;
  at::Tensor weight = first ? work.tied.detach().contiguous() : at::empty_like(work.tied);
  ends->communicator().broadcast(weight, 0, {.async = false});
  if (last) {
    at::NoGradGuard no_grad;
    work.tied.copy_(weight);
    work.tied.mutable_grad() = at::Tensor();
  }
  return true;
}

// The last stage's sum of losses, on every stage.
double from_last_stage(ParallelGrid& grid, double loss_sum) {
  at::Tensor loss = at::full({1}, loss_sum, at::kDouble);
  grid.pipeline().communicator().broadcast(loss, grid.stages() - 1, {.async = false});
  return loss.item<double>();
}

}  // namespace

double train_step(ParallelGrid& grid, Engine& engine, const StageWork& work, const StepOptions& options) {
  const int stage = grid.stage(), stages = grid.stages();
  const bool first = stage == 0, last = stage == stages - 1;
  const int64_t m = options.micro_batches;
  const bool tied = share_tied_weight(grid, work);
  World* ends = grid.first_and_last();
  struct InFlight {
    at::Tensor output, input;  // this stage's output (the loss on the last) and its received input
  };
  std::deque<InFlight> waiting;  // forwards whose backward has not run, oldest first
  double loss_sum = 0;
  int64_t forwards = 0, backwards = 0;
  auto forward = [&] {
    at::Tensor input;
    const int64_t micro = forwards++;
    if (!first) {
      input = receive_whole_or_piece(*grid.activations_in(), work.activation_shape(micro), work.activation_dtype,
                                     options.partition_activations_over);
      input.requires_grad_(true);
    }
    at::Tensor output = engine.forward([&] { return work.forward(micro, input); });
    if (last) {
      loss_sum += output.item<double>();
    } else {
      send_whole_or_piece(*grid.activations_out(), output, options.partition_activations_over);
    }
    waiting.push_back({output, input});
  };
  auto backward = [&] {
    InFlight f = std::move(waiting.front());
    waiting.pop_front();
    const int64_t micro = backwards;
    const bool final = ++backwards == m;
    if (last) {
      engine.backward(f.output);
    } else {
      const at::Tensor grad = receive_whole_or_piece(*grid.gradients_in(), work.activation_shape(micro),
                                                     work.activation_dtype, options.partition_gradients_over);
      std::vector<at::Tensor> roots{f.output}, grads{grad};
      if (tied && final && first) {
        // The last stage's gradients of the tied weight join the embedding's in this backward, so
        // the engine reduces them with the rest: d(sum(w · g))/dw = g, exactly.
        at::Tensor from_last = at::empty_like(work.tied);
        ends->communicator().broadcast(from_last, ends->size() - 1, {.async = false});
        roots.push_back((work.tied * from_last).sum());
        grads.push_back(at::ones({}, roots.back().options()));
      }
      engine.backward(roots, grads);
    }
    if (!first) send_whole_or_piece(*grid.gradients_out(), f.input.grad(), options.partition_gradients_over);
    if (last && tied && final) {
      // The copy's gradients of the whole step, in the units of the engine's (scaled as the loss),
      // after the activation's gradient: the first stage needs that one to reach its last backward.
      at::Tensor grad = work.tied.grad().defined() ? work.tied.grad().contiguous() : at::zeros_like(work.tied);
      ends->communicator().broadcast(grad, ends->size() - 1, {.async = false});
    }
    engine.step();
  };
  // Megatron's non-interleaved 1F1B: the warm-up forwards, one forward and one backward by turns,
  // the backwards left.
  const int64_t warmup = std::min<int64_t>(stages - stage - 1, m);
  for (int64_t i = 0; i < warmup; ++i) forward();
  for (int64_t i = warmup; i < m; ++i) {
    forward();
    backward();
  }
  while (!waiting.empty()) backward();
  for (PipelineLink* link : {grid.activations_out(), grid.gradients_out()})
    if (link) link->wait_sent();
  return from_last_stage(grid, loss_sum);
}

double evaluate(ParallelGrid& grid, Engine& engine, const StageWork& work, const StepOptions& options) {
  const bool first = grid.stage() == 0, last = grid.stage() == grid.stages() - 1;
  share_tied_weight(grid, work);
  double loss_sum = 0;
  for (int64_t micro = 0; micro < options.micro_batches; ++micro) {
    at::Tensor input;
    if (!first) {
      input = receive_whole_or_piece(*grid.activations_in(), work.activation_shape(micro), work.activation_dtype,
                                     options.partition_activations_over);
    }
    const at::Tensor output = engine.forward([&] { return work.forward(micro, input); });
    if (last) {
      loss_sum += output.item<double>();
    } else {
      send_whole_or_piece(*grid.activations_out(), output, options.partition_activations_over);
    }
  }
  if (PipelineLink* link = grid.activations_out()) link->wait_sent();
  return from_last_stage(grid, loss_sum);
}

}  // namespace pipeline
}  // namespace zero
