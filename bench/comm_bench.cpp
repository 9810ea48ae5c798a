// bench_comm — bus bandwidth of zerocpp's communicator vs raw MPI calls, per op and message size,
// measured side by side in one run (nccl-tests formulas: algbw = bytes / time; busbw = algbw ×
// 2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter and all-gather, 1 for broadcast).
//
//   zero-run -n 2 build/bench/bench_comm [--quick] [--max-bytes N]
#include <fmt/core.h>
#include <mpi.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "zero/world.h"
#include "programs.h"

namespace bench_comm {

namespace {

using Clock = std::chrono::steady_clock;

struct OpCase {
  zero::CollectiveOp op;
  double bus_factor;
};

// Median seconds per call of `fn`, over enough calls to fill about `budget` seconds.
double time_per_call(const std::function<void()>& fn, double budget, MPI_Comm comm) {
  for (int i = 0; i < 2; ++i) fn();  // warm-up
  MPI_Barrier(comm);
  auto t0 = Clock::now();
  fn();
  double once = std::chrono::duration<double>(Clock::now() - t0).count();
  // Every rank must run the same number of calls: agree on the slowest estimate.
  MPI_Allreduce(MPI_IN_PLACE, &once, 1, MPI_DOUBLE, MPI_MAX, comm);
  int iters = std::clamp(static_cast<int>(budget / std::max(once, 1e-7)), 3, 2000);
  std::vector<double> samples;
  const int rounds = 5;
  for (int r = 0; r < rounds; ++r) {
    MPI_Barrier(comm);
    auto start = Clock::now();
    for (int i = 0; i < (iters + rounds - 1) / rounds; ++i) fn();
    samples.push_back(std::chrono::duration<double>(Clock::now() - start).count() / ((iters + rounds - 1) / rounds));
  }
  std::sort(samples.begin(), samples.end());
  double median = samples[samples.size() / 2];
  MPI_Allreduce(MPI_IN_PLACE, &median, 1, MPI_DOUBLE, MPI_MAX, comm);
  return median;
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"bench_comm: zerocpp communicator vs raw MPI bus bandwidth"};
  bool quick = false;
  int64_t max_bytes = 64 << 20;
  double budget = 0.3;
  app.add_flag("--quick", quick, "a few sizes only (for the demo)");
  app.add_option("--max-bytes", max_bytes, "largest message");
  app.add_option("--budget", budget, "seconds per measurement");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);

  zero::World world = zero::World::from_environment();
  if (!world.distributed()) {
    fmt::print(stderr, "bench_comm compares against raw MPI: start it with zero-run -n N (or mpirun)\n");
    return 2;
  }
  const int n = world.size(), rank = world.rank();
  const double nd = n;
  // A second world whose communicator skips the cross-rank consistency check, to show its cost.
  zero::CommunicatorOptions unchecked_options;
  unchecked_options.check_consistency = false;
  zero::World unchecked_world = zero::World::from_environment(unchecked_options);
  MPI_Comm raw = MPI_COMM_WORLD;

  std::vector<OpCase> ops = {{zero::CollectiveOp::kAllReduce, 2 * (nd - 1) / nd},
                             {zero::CollectiveOp::kReduceScatter, (nd - 1) / nd},
                             {zero::CollectiveOp::kAllGather, (nd - 1) / nd},
                             {zero::CollectiveOp::kBroadcast, 1.0}};
  std::vector<int64_t> sizes;
  for (int64_t b = quick ? (1 << 16) : 4096; b <= (quick ? (4 << 20) : max_bytes); b *= quick ? 8 : 4)
    sizes.push_back(b);

  if (rank == 0) {
    fmt::print("# bench_comm: {} rank(s), float32, torch threads 1\n", n);
    fmt::print("# blocking: MPI_<op> vs zerocpp {{.async = false}}; async: MPI_I<op> + MPI_Wait vs zerocpp async + wait;\n");
    fmt::print("# unchecked: zerocpp blocking without the cross-rank consistency check. busbw in GB/s.\n");
    fmt::print("| op | bytes | MPI busbw | zerocpp busbw | zerocpp / MPI | MPI_I* busbw | zerocpp async busbw | "
               "async / MPI_I* | unchecked / MPI | zerocpp µs |\n");
    fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  const zero::CollectiveOptions blocking{.async = false};
  for (const OpCase& c : ops) {
    for (int64_t bytes : sizes) {
      const int64_t chunk = bytes / 4 / n;
      if (chunk == 0) continue;
      const int64_t total = chunk * n;  // the message: all-reduce/broadcast tensor, reduce-scatter input, all-gather output
      at::Tensor full = torch::ones({total});
      at::Tensor part = torch::ones({chunk});
      at::Tensor full_out = torch::empty({total});
      const int count = static_cast<int>(total), chunk_count = static_cast<int>(chunk);
      auto ours = [&](zero::Communicator& comm, const zero::CollectiveOptions& mode) -> std::function<void()> {
        switch (c.op) {
          case zero::CollectiveOp::kAllReduce: return [&, mode] { comm.all_reduce(full, zero::ReduceOp::kSum, mode)->wait(); };
          case zero::CollectiveOp::kReduceScatter:
            return [&, mode] { comm.reduce_scatter(full, part, zero::ReduceOp::kSum, mode)->wait(); };
          case zero::CollectiveOp::kAllGather: return [&, mode] { comm.all_gather(part, full_out, mode)->wait(); };
          default: return [&, mode] { comm.broadcast(full, 0, mode)->wait(); };
        }
      };
      // Raw MPI, blocking (nonblocking = false) or MPI_I<op> followed by MPI_Wait.
      auto mpi = [&](bool nonblocking) -> std::function<void()> {
        return [&, nonblocking] {
          MPI_Request r;
          switch (c.op) {
            case zero::CollectiveOp::kAllReduce:
              if (!nonblocking) MPI_Allreduce(MPI_IN_PLACE, full.data_ptr(), count, MPI_FLOAT, MPI_SUM, raw);
              else MPI_Iallreduce(MPI_IN_PLACE, full.data_ptr(), count, MPI_FLOAT, MPI_SUM, raw, &r);
              break;
            case zero::CollectiveOp::kReduceScatter:
              if (!nonblocking) MPI_Reduce_scatter_block(full.data_ptr(), part.data_ptr(), chunk_count, MPI_FLOAT, MPI_SUM, raw);
              else MPI_Ireduce_scatter_block(full.data_ptr(), part.data_ptr(), chunk_count, MPI_FLOAT, MPI_SUM, raw, &r);
              break;
            case zero::CollectiveOp::kAllGather:
              if (!nonblocking) {
                MPI_Allgather(part.data_ptr(), chunk_count, MPI_FLOAT, full_out.data_ptr(), chunk_count, MPI_FLOAT, raw);
              } else {
                MPI_Iallgather(part.data_ptr(), chunk_count, MPI_FLOAT, full_out.data_ptr(), chunk_count, MPI_FLOAT, raw, &r);
              }
              break;
            default:
              if (!nonblocking) MPI_Bcast(full.data_ptr(), count, MPI_FLOAT, 0, raw);
              else MPI_Ibcast(full.data_ptr(), count, MPI_FLOAT, 0, raw, &r);
              break;
          }
          if (nonblocking) MPI_Wait(&r, MPI_STATUS_IGNORE);
        };
      };
      double t_mpi = time_per_call(mpi(false), budget, raw);
      double t_ours = time_per_call(ours(world.communicator(), blocking), budget, raw);
      double t_mpi_nb = time_per_call(mpi(true), budget, raw);
      double t_async = time_per_call(ours(world.communicator(), {}), budget, raw);
      double t_unchecked = time_per_call(ours(unchecked_world.communicator(), blocking), budget, raw);
      auto busbw = [&](double t) { return static_cast<double>(total) * 4 / t * c.bus_factor / 1e9; };
      if (rank == 0) {
        fmt::print("| {} | {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.1f} |\n", zero::to_string(c.op),
                   total * 4, busbw(t_mpi), busbw(t_ours), t_mpi / t_ours, busbw(t_mpi_nb), busbw(t_async),
                   t_mpi_nb / t_async, t_mpi / t_unchecked, t_ours * 1e6);
      }
    }
  }
  return 0;
}

}  // namespace bench_comm
