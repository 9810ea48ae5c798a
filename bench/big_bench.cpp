// bench_big — a big GPT on one rank (201 M parameters; docs/PERFORMANCE.md): the engine's step against the
// bound it cannot beat, measured in the same run: plain LibTorch forward + backward of the same
// model and batch, plus one pass of AdamW over the parameters at the machine's memory bandwidth
// (28 bytes per parameter: read w, g, m, v; write w, m, v) measured here by a STREAM-style copy.
//
//   build/bench/bench_big [--layers 16 --heads 16 --channels 1024 --vocab 256 --seq 64 --micro-batch 4]
//                         [--steps 5] [--stages 0 3] [--sub-group-size 1e9]
// Peak RSS and system time of a whole run come from /usr/bin/time around zero-train
// (docs/PERFORMANCE.md shows the command).
#include <fmt/core.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <vector>

#include "models/gpt/gpt.h"
#include "zero/allocator.h"
#include "zero/engine.h"
#include "programs.h"

namespace bench_big {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double system_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Bytes per second of a large copy (read + write), best of a few: the bandwidth one pass gets.
double copy_bandwidth() {
  at::Tensor a = torch::ones({int64_t{64} << 20}), b = torch::zeros({int64_t{64} << 20});  // 256 MiB each
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    b.copy_(a);
    best = std::max(best, 2.0 * static_cast<double>(a.nbytes()) / seconds_since(t0));
  }
  return best;
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"bench_big: a big GPT on one rank against its bound"};
  zero::gpt::GptShape shape{.max_seq = 64, .vocab = 256, .layers = 16, .heads = 16, .channels = 1024};
  int64_t micro = 4, steps = 5, warmup = 2;
  double sub_group = 1e9;
  std::vector<int> stages{0, 3};
  app.add_option("--layers", shape.layers);
  app.add_option("--heads", shape.heads);
  app.add_option("--channels", shape.channels);
  app.add_option("--vocab", shape.vocab);
  app.add_option("--seq", shape.max_seq);
  app.add_option("--micro-batch", micro);
  app.add_option("--steps", steps);
  app.add_option("--stages", stages);
  app.add_option("--sub-group-size", sub_group);
  CLI11_PARSE(app, argc, argv);
  shape.padded_vocab = (shape.vocab + 127) / 128 * 128;
  torch::set_num_threads(1);
  zero::keep_freed_memory();
  zero::World world = zero::World::single_process();
  torch::manual_seed(1);
  at::Tensor tokens = torch::randint(shape.vocab, {micro, shape.max_seq}, torch::kLong);
  at::Tensor targets = torch::randint(shape.vocab, {micro, shape.max_seq}, torch::kLong);

  double fb = 0;
  int64_t params = 0;
  {  // plain LibTorch: forward + backward into .grad tensors kept from step to step (zeroed in
     // place, torch's zero_grad(set_to_none=false)), so no step allocates its gradients anew
    zero::gpt::Gpt plain(shape);
    for (const auto& p : plain.parameters()) params += p.numel();
    std::vector<double> times;
    for (int s = 0; s < warmup + steps; ++s) {
      for (auto& p : plain.parameters())
        if (p.grad().defined()) p.mutable_grad().zero_();
      auto t0 = Clock::now();
      plain.loss(tokens, targets).backward();
      if (s >= warmup) times.push_back(seconds_since(t0));
    }
    fb = median(times);
  }
  const double bandwidth = copy_bandwidth();
  const double adam_bound = 28.0 * static_cast<double>(params) / bandwidth;
  fmt::print(
      "# bench_big: {} parameters (L={}, NH={}, C={}, V={}, T={}), micro-batch {}, 1 thread, sub_group_size {:g}\n",
      params, shape.layers, shape.heads, shape.channels, shape.vocab, shape.max_seq, micro, sub_group);
  fmt::print(
      "# plain LibTorch forward+backward {:.0f} ms; copy bandwidth {:.1f} GB/s, so one AdamW pass (28 B/param) "
      "takes at least {:.0f} ms; bound = {:.0f} ms\n",
      fb * 1e3, bandwidth / 1e9, adam_bound * 1e3, (fb + adam_bound) * 1e3);
  fmt::print("| stage | step ms (median of {}) | bound ms | step / bound | system time / step time | model state B |\n",
             steps);
  fmt::print("|---:|---:|---:|---:|---:|---:|\n");
  for (int stage : stages) {
    torch::manual_seed(1);
    zero::gpt::Gpt model(shape);
    zero::Config config = zero::Config::parse(fmt::format(
        R"({{"train_micro_batch_size_per_gpu": {}, "gradient_clipping": 1.0,
            "zero_optimization": {{"stage": {}, "sub_group_size": {}}},
            "optimizer": {{"type": "AdamW", "params": {{"lr": 0.0003, "weight_decay": 0.01}}}}}})",
        micro, stage, static_cast<int64_t>(sub_group)));
    config.resolve({.world_size = 1});
    zero::Engine engine(model, config, world);
    std::vector<double> times;
    double system = 0;
    for (int s = 0; s < warmup + steps; ++s) {
      const double system0 = system_seconds();
      auto t0 = Clock::now();
      engine.backward(engine.forward([&] { return model.loss(tokens, targets); }));
      engine.step();
      if (s < warmup) continue;
      times.push_back(seconds_since(t0));
      system += system_seconds() - system0;
    }
    const double t = median(times);
    double total = 0;
    for (double x : times) total += x;
    fmt::print("| {} | {:.0f} | {:.0f} | {:.2f} | {:.1f} % | {} |\n", stage, t * 1e3, (fb + adam_bound) * 1e3,
               t / (fb + adam_bound), 100.0 * system / total, engine.memory_report().total());
  }
  return 0;
}

}  // namespace bench_big
