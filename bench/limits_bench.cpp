// bench_limits — the machine's own limits, for judging other figures against them: memory
// bandwidth (STREAM-style copy and triad over arrays far larger than the caches, on 1 and 2
// threads) and GEMM FLOP/s through LibTorch (fp32 and bf16, one thread, the GPT's shapes).
// Prints a markdown table; single process (MPI bandwidth: bench_comm). Run with
// OMP_NUM_THREADS=1 for one BLAS thread: OpenBLAS reads it when it loads, before main.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>
#include "programs.h"

namespace bench_limits {

namespace {

double seconds_of(const std::function<void()>& fn, int repeats) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// fn(begin, end) on `threads` threads over [0, n).
void split(int threads, size_t n, const std::function<void(size_t, size_t)>& fn) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(fn, n * t / threads, n * (t + 1) / threads);
  for (auto& th : pool) th.join();
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"bench_limits: memory bandwidth and GEMM FLOP/s of this machine"};
  size_t mib = 256;
  app.add_option("--array-mib", mib, "size of each STREAM array");
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(1);
  const size_t n = mib * 1024 * 1024 / sizeof(double);
  std::vector<double> a(n, 1.0), b(n, 2.0), c(n, 0.0);
  fmt::print("| measure | threads | result |\n|---|---|---|\n");
  for (int threads : {1, 2}) {
    const double copy = seconds_of([&] { split(threads, n, [&](size_t i0, size_t i1) { std::copy(a.begin() + i0, a.begin() + i1, c.begin() + i0); }); }, 5);
    const double triad = seconds_of([&] {
      split(threads, n, [&](size_t i0, size_t i1) {
        for (size_t i = i0; i < i1; ++i) a[i] = b[i] + 3.0 * c[i];
      });
    }, 5);
    fmt::print("| STREAM copy | {} | {:.1f} GB/s |\n", threads, 2.0 * 8 * n / copy / 1e9);
    fmt::print("| STREAM triad | {} | {:.1f} GB/s |\n", threads, 3.0 * 8 * n / triad / 1e9);
  }
  // The GPT's matmuls at B·T = 1024 rows, C = 128: the MLP's [1024 × 128] · [128 × 512], and a
  // large square one for the peak.
  struct Shape {
    int64_t m, k, n;
  };
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (Shape s : {Shape{1024, 128, 512}, Shape{1024, 1024, 1024}}) {
      const at::Tensor x = at::randn({s.m, s.k}).to(dtype), w = at::randn({s.k, s.n}).to(dtype);
      at::mm(x, w);
      const double t = seconds_of([&] { at::mm(x, w); }, 10);
      fmt::print("| GEMM {} {}×{}×{} | 1 | {:.2f} GFLOP/s |\n", dtype == at::kFloat ? "fp32" : "bf16", s.m, s.k, s.n,
                 2.0 * s.m * s.k * s.n / t / 1e9);
    }
  }
  return 0;
}

}  // namespace bench_limits
