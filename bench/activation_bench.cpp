// The GPT's activation memory with and without activation checkpointing, measured with the
// tracking allocator (the peak of live tensor bytes during forward and backward, over what the
// model and its gradients hold), next to gpt_activation_bytes' formula; and the step time with
// checkpointing as a ratio to without, measured side by side (alternating runs).
// With --budget-gb G: the longest context (in steps of --step tokens) whose forward and backward
// fit in G GB of tensor memory beyond the model's (the tracker's budget), with and without.
//   bench_activation [--layers L] [--channels C] [--heads H] [--seqs 256,1024] [--rows B]
//                    [--repeats N] [--budget-gb G [--step T]]
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <torch/torch.h>

#include <chrono>

#include "models/gpt/gpt.h"
#include "zero/allocator.h"
#include "zero/memory_tracker.h"
#include "programs.h"

namespace bench_activation {

using zero::gpt::Gpt;
using zero::gpt::GptShape;

namespace {

struct Measured {
  int64_t activation_bytes = 0;
  double seconds = 0;
};

Measured measure(Gpt& model, int64_t rows, int64_t seq, int64_t every, zero::MemoryTracker& tracker) {
  model.checkpoint_every = every;
  const at::Tensor tokens = torch::randint(model.shape.vocab, {rows, seq}, torch::kLong);
  const at::Tensor targets = torch::randint(model.shape.vocab, {rows, seq}, torch::kLong);
  tracker.reset_peak();
  const int64_t base = tracker.current();
  const auto start = std::chrono::steady_clock::now();
  model.loss(tokens, targets).backward();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {tracker.peak() - base, seconds};
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"activation memory and time with and without activation checkpointing"};
  GptShape shape{.max_seq = 4096, .vocab = 256, .layers = 12, .heads = 12, .channels = 768};
  std::vector<int64_t> seqs = {256, 1024, 4096};
  int64_t rows = 1, repeats = 3;
  app.add_option("--layers", shape.layers)->capture_default_str();
  app.add_option("--channels", shape.channels)->capture_default_str();
  app.add_option("--heads", shape.heads)->capture_default_str();
  app.add_option("--seqs", seqs)->delimiter(',');
  app.add_option("--rows", rows)->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs of each, alternating")->capture_default_str();
  double budget_gb = 0;
  int64_t step = 512, longest = 16384;
  app.add_option("--budget-gb", budget_gb, "find the longest context within this much activation memory");
  app.add_option("--step", step, "with --budget-gb: context lengths tried, in steps of this")->capture_default_str();
  app.add_option("--longest", longest, "with --budget-gb: the longest context tried")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (budget_gb > 0) seqs = {longest};
  torch::set_num_threads(1);
  zero::keep_freed_memory();  // as zero-train: a step's activations reuse the last step's memory
  zero::MemoryTracker& tracker = zero::MemoryTracker::install();
  for (int64_t s : seqs) shape.max_seq = std::max<int64_t>(shape.max_seq, s);
  shape.padded_vocab = (shape.vocab + 63) / 64 * 64;
  torch::manual_seed(1);
  Gpt model(shape);
  fmt::print("bench_activation: GPT L={} C={} NH={} V={}, {} row(s), fp32, 1 thread\n", shape.layers, shape.channels,
             shape.heads, shape.vocab, rows);
  if (budget_gb > 0) {
    measure(model, rows, step, 0, tracker);  // the gradients, allocated once
    const int64_t budget = tracker.current() + static_cast<int64_t>(budget_gb * 1e9);
    for (int64_t every : {int64_t{0}, int64_t{1}}) {
      int64_t fits = 0;
      for (int64_t seq = step; seq <= longest; seq += step) {
        tracker.set_budget(budget);
        bool ok = true;
        try {
          measure(model, rows, seq, every, tracker);
        } catch (const std::exception&) {
          ok = false;
        }
        tracker.set_budget(0);
        if (!ok) break;
        fits = seq;
        fmt::print("  T={} fits ({}), peak {:.2f} GB\n", seq, every ? "checkpointed" : "plain",
                   (tracker.peak() - budget + static_cast<int64_t>(budget_gb * 1e9)) / 1e9);
        std::fflush(stdout);
      }
      fmt::print("| {} | {:.1f} GB | longest context that trains: {} tokens |\n",
                 every ? "with checkpointing" : "without", budget_gb, fits);
    }
    return 0;
  }
  fmt::print("| T | measured MB | formula MB | measured MB, checkpointed | formula MB, checkpointed | ratio | step s | "
             "step s, checkpointed | time ratio |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int64_t seq : seqs) {
    measure(model, rows, seq, 0, tracker);  // gradients exist from here on: they are not activations
    Measured plain, checkpointed;
    double plain_s = 0, ckpt_s = 0;
    for (int64_t r = 0; r < repeats; ++r) {
      plain = measure(model, rows, seq, 0, tracker);
      checkpointed = measure(model, rows, seq, 1, tracker);
      plain_s += plain.seconds;
      ckpt_s += checkpointed.seconds;
    }
    const auto formula = zero::gpt::gpt_activation_bytes(shape, rows, seq, 1);
    fmt::print("| {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {:.3f} | {:.3f} | {:.2f} |\n", seq,
               plain.activation_bytes / 1e6, formula.without_checkpointing / 1e6, checkpointed.activation_bytes / 1e6,
               formula.with_checkpointing / 1e6,
               static_cast<double>(plain.activation_bytes) / static_cast<double>(checkpointed.activation_bytes),
               plain_s / repeats, ckpt_s / repeats, ckpt_s / plain_s);
  }
  return 0;
}

}  // namespace bench_activation
