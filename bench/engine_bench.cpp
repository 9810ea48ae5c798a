// bench_engine — step time of ZeRO stages 0-3 on a small transformer, and the engine's own
// overhead against plain LibTorch (forward + backward + torch::optim::AdamW) on the same work.
//
//   zero-run -n 2 build/bench/bench_engine [--steps N] [--channels C] [--layers L]
// Prints one table row per stage (rank 0). Ratios are measured in the same process.
#include <fmt/core.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <vector>

#include "models/tiny/tiny_transformer.h"
#include "optim/flat_optimizer.h"
#include "zero/allocator.h"
#include "zero/engine.h"
#include "programs.h"

namespace bench_engine {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"bench_engine: ZeRO stage step times on a small transformer"};
  int steps = 40, warmup = 3;
  zero::models::TinyTransformerOptions o{.vocab = 256, .channels = 128, .heads = 4, .layers = 4, .max_seq = 64};
  int64_t micro = 8;
  std::vector<int> stages{0, 1, 2, 3};
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--channels", o.channels);
  app.add_option("--layers", o.layers);
  app.add_option("--micro-batch", micro);
  app.add_option("--stages", stages, "stages to run (the first is the ratio's base)");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  zero::keep_freed_memory();  // include/zero/allocator.h: the same tensors every step
  zero::World world = zero::World::from_environment();
  const int n = world.size();
  auto [tokens, targets] = zero::models::tiny_batch(micro, o, 1);

  // Plain LibTorch on this rank's micro-batch: forward + backward alone, torch::optim::AdamW's
  // step alone, and our flat AdamW over the same number of elements. One plain step runs before
  // each engine step, so every row's baseline is measured in the same minutes as its engine.
  torch::manual_seed(1);
  auto plain = std::make_shared<zero::models::TinyTransformer>(o);
  int64_t params = 0;
  for (const auto& p : plain->parameters()) params += p.numel();
  torch::optim::AdamW adam(plain->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  zero::OptimizerConfig adamw;
  adamw.type = zero::OptimizerType::kAdamW;
  adamw.weight_decay = 0.01;
  auto flat = zero::optim::make_flat_optimizer(adamw, params);
  at::Tensor master = torch::randn({params}), grads = torch::randn({params}) * 1e-3;
  std::vector<double> forward_backward, torch_adam, flat_adam;
  int plain_steps = 0;
  auto plain_step = [&] {
    auto t0 = Clock::now();
    adam.zero_grad();
    plain->loss(tokens, targets).backward();
    auto t1 = Clock::now();
    adam.step();
    auto t2 = Clock::now();
    flat->step(master, grads, {.lr = 1e-3, .step = ++plain_steps});
    auto t3 = Clock::now();
    forward_backward.push_back(std::chrono::duration<double>(t1 - t0).count());
    torch_adam.push_back(std::chrono::duration<double>(t2 - t1).count());
    flat_adam.push_back(std::chrono::duration<double>(t3 - t2).count());
  };
  for (int s = 0; s < warmup + steps; ++s) plain_step();
  if (world.rank() == 0) {
    fmt::print(
        "# bench_engine: {} rank(s), {} parameters (C={}, L={}, T={}), micro-batch {} per rank, 1 thread per rank\n", n,
        params, o.channels, o.layers, o.max_seq, micro);
    fmt::print(
        "# plain LibTorch on one rank's micro-batch: forward+backward {:.2f} ms; torch::optim::AdamW step {:.2f} ms; "
        "zerocpp's flat AdamW over all {} elements {:.2f} ms\n",
        median(forward_backward) * 1e3, median(torch_adam) * 1e3, params, median(flat_adam) * 1e3);
    fmt::print(
        "# rest = step - plain forward/backward - flat AdamW over this rank's share (1/N at stages 1-3), the "
        "plain step run just before each engine step: hooks, bucketing, copies, norm, communication\n");
    fmt::print(
        "# MPI = time inside the engine's collectives per step (blocking: overlap_comm and stage-3 prefetch off); "
        "engine overhead = rest - MPI; all medians over steps of the per-step values\n");
    fmt::print(
        "| ranks | stage | step ms (median) | vs stage {} | plain f+b ms | rest ms | MPI ms | engine overhead ms | "
        "overhead / step | model state B/rank |\n",
        stages.front());
    fmt::print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  double stage0 = 0;
  for (int stage : stages) {
    torch::manual_seed(1);
    auto model = std::make_shared<zero::models::TinyTransformer>(o);
    zero::Config config = zero::Config::parse(fmt::format(
        R"({{"train_micro_batch_size_per_gpu": {}, "gradient_clipping": 1.0,
            "zero_optimization": {{"stage": {}, "overlap_comm": false, "reduce_bucket_size": 500000,
                                  "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 0}},
            "optimizer": {{"type": "AdamW", "params": {{"lr": 0.001, "weight_decay": 0.01}}}}}})",
        micro, stage));
    config.resolve({.world_size = n});
    zero::Engine engine(*model, config, world);
    auto mpi_seconds = [&] {
      double total = 0;
      for (const auto& [key, stats] : engine.comm_stats().by_size()) total += stats.seconds;
      return total;
    };
    // Per step: the engine's time, and what is left of it after the plain step run just before it
    // (paired, so drifts in the machine's speed cancel) and after its own MPI time.
    std::vector<double> times, rests, overheads, mpis;
    const int share = stage == 0 ? 1 : n;
    forward_backward.clear();
    flat_adam.clear();
    for (int s = 0; s < warmup + steps; ++s) {
      plain_step();
      world.communicator().barrier({.async = false});
      const double mpi_before = mpi_seconds();
      auto t0 = Clock::now();
      engine.backward(engine.forward([&] { return model->loss(tokens, targets); }));
      engine.step();
      const double t = std::chrono::duration<double>(Clock::now() - t0).count(), mpi = mpi_seconds() - mpi_before;
      if (s < warmup) continue;
      times.push_back(t);
      rests.push_back(t - forward_backward.back() - flat_adam.back() / share);
      mpis.push_back(mpi);
      overheads.push_back(rests.back() - mpi);
    }
    const double t = median(times), fb = median(forward_backward), rest = median(rests), mpi = median(mpis),
                 overhead = median(overheads);
    if (stage0 == 0) stage0 = t;
    if (world.rank() == 0) {
      fmt::print("| {} | {} | {:.2f} | {:.3f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.1f} % | {} |\n", n, stage,
                 t * 1e3, t / stage0, fb * 1e3, rest * 1e3, mpi * 1e3, overhead * 1e3, 100.0 * overhead / t,
                 engine.memory_report().total());
    }
  }
  return 0;
}

}  // namespace bench_engine
