// bench_adam — the CPU optimizer at memory speed: zerocpp's fused AdamW (cpu_kernels.h) against
// torch::optim::AdamW and a STREAM-style copy of the same machine, on 10^5 to 10^8 parameters at
// 1 and 2 threads. Memory traffic: AdamW reads p, g, m, v and writes p, m, v (28 bytes per
// parameter); the copy reads one array and writes another (8 bytes per float).
//
//   build/bench/bench_adam [--max 100000000] [--repeats 5]
#include <fmt/core.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "optim/cpu_kernels.h"
#include "programs.h"

namespace bench_adam {

namespace {

using Clock = std::chrono::steady_clock;

template <class Fn>
double best_seconds(int repeats, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"bench_adam: fused CPU AdamW vs torch::optim::AdamW vs a STREAM copy"};
  int64_t max_n = 100'000'000;
  int repeats = 5;
  app.add_option("--max", max_n, "largest parameter count");
  app.add_option("--repeats", repeats, "best of this many runs");
  CLI11_PARSE(app, argc, argv);
  fmt::print("| parameters | threads | zerocpp AdamW ms | params/s | GB/s | torch AdamW ms | zerocpp / torch | copy GB/s | AdamW / copy |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int64_t n = 100'000; n <= max_n; n *= 10) {
    for (int threads : {1, 2}) {
      at::set_num_threads(threads);
      at::Tensor p = torch::randn({n}), g = torch::randn({n}), m = torch::zeros({n}), v = torch::zeros({n});
      zero::optim::AdamScalars s{.step_size = 1e-3f, .sqrt_bc2 = 0.03f, .decay = 0.9999f};
      const double ours = best_seconds(repeats, [&] {
        zero::optim::adam_update(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n, s);
      });
      at::Tensor tp = p.clone().requires_grad_(true);
      tp.mutable_grad() = g.clone();
      torch::optim::AdamW torch_adam({tp}, torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
      torch_adam.step();  // its state exists from here on
      const double theirs = best_seconds(repeats, [&] { torch_adam.step(); });
      // The STREAM copy, split over the same threads.
      at::Tensor a = torch::zeros({n}), b = torch::randn({n});
      const double copy = best_seconds(repeats, [&] {
        at::parallel_for(0, n, 1 << 16, [&](int64_t begin, int64_t end) {
          std::memcpy(a.data_ptr<float>() + begin, b.data_ptr<float>() + begin, static_cast<size_t>(end - begin) * 4);
        });
      });
      const double adam_gbs = 28.0 * n / ours / 1e9, copy_gbs = 8.0 * n / copy / 1e9;
      fmt::print("| {} | {} | {:.3f} | {:.3g} | {:.2f} | {:.3f} | {:.1f}x | {:.2f} | {:.0f} % |\n", n, threads,
                 ours * 1e3, n / ours, adam_gbs, theirs * 1e3, theirs / ours, copy_gbs, 100 * adam_gbs / copy_gbs);
    }
  }
  return 0;
}

}  // namespace bench_adam
