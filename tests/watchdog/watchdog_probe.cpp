// watchdog_probe — a tiny training loop of collectives for the watchdog's end-to-end test
// (tests/e2e/watchdog_e2e.sh): every step an all-reduce and an all-gather. One rank can be made
// to skip a step's all-reduce and then stay away (busy elsewhere) for a while.
//
//   mpirun -np 2 watchdog_probe --steps 20 --skip-rank 1 --skip-step 3 --away 60
#include <ATen/ATen.h>
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <thread>

#include "comm/progress.h"
#include "comm/watchdog.h"
#include "zero/error.h"
#include "zero/world.h"

int main(int argc, char** argv) {
  CLI::App app{"watchdog_probe"};
  int64_t steps = 20, skip_step = -1;
  int skip_rank = -1;
  double away = 0, timeout = 1800, warning = 60, step_seconds = 0.05;
  app.add_option("--steps", steps);
  app.add_option("--skip-rank", skip_rank, "this rank skips one all-reduce");
  app.add_option("--skip-step", skip_step, "at this step (1-based)");
  app.add_option("--away", away, "then computes this many seconds before its next collective");
  app.add_option("--timeout", timeout);
  app.add_option("--warning", warning);
  app.add_option("--step-seconds", step_seconds, "compute time per step");
  CLI11_PARSE(app, argc, argv);
  try {
    zero::World world = zero::World::from_environment();
    auto watchdog = zero::comm_detail::Watchdog::start(world, zero::comm_detail::watchdog_options(timeout, warning));
    at::Tensor x = at::ones({1000});
    at::Tensor gathered = at::empty({1000 * world.size()});
    for (int64_t step = 1; step <= steps; ++step) {
      zero::comm_detail::set_progress_step(step);
      std::this_thread::sleep_for(std::chrono::duration<double>(step_seconds));
      if (world.rank() == skip_rank && step == skip_step) {
        std::this_thread::sleep_for(std::chrono::duration<double>(away));
      } else {
        world.communicator().all_reduce(x, zero::ReduceOp::kAvg, {.async = false});
      }
      world.communicator().all_gather(x, gathered, {.async = true})->wait();
    }
    if (world.rank() == 0) fmt::print("watchdog_probe: {} steps done\n", steps);
    return 0;
  } catch (const zero::Error& e) {
    fmt::print(stderr, "watchdog_probe: {}\n", e.what());
    return 1;
  }
}
