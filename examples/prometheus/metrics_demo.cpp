// metrics_demo: zerocpp's training metrics with made-up values, for trying the Prometheus setup
// in this directory without a training job, and for checking the output with promtool.
//
//   metrics_demo                  print one /metrics body and exit
//   metrics_demo --port 9400      serve GET /metrics on 127.0.0.1:9400 until Ctrl-C, with a
//                                 pretend training loop updating the values once a second
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "zero/error.h"
#include "zero/metrics.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void request_stop(int) { g_stop = 1; }

// One pretend optimizer step: what the engine would set after a real one.
void pretend_step(zero::metrics::TrainingMetrics& m, int step, std::mt19937& rng) {
  using zero::metrics::MemoryCategory;
  std::normal_distribution<double> jitter(1.0, 0.03);
  m.step_time_seconds.set(0.412 * jitter(rng));
  m.optimizer_step_seconds.set(0.061 * jitter(rng));
  for (int i = 0; i < 24; ++i) m.allgather_seconds.observe(0.0011 * jitter(rng));
  for (int i = 0; i < 12; ++i) m.reduce_scatter_seconds.observe(0.0019 * jitter(rng));
  m.grad_norm.set(1.27 * jitter(rng));
  m.samples_per_second.set(155.3);
  m.tokens_per_second.set(159027);
  m.loss.set(3.2817 - 0.0001 * step);
  m.lr.set(0.0006);
  m.loss_scale.set(65536);
  m.global_step.set(step);
  m.memory_bytes(MemoryCategory::kParameters).set(248823808);
  m.memory_bytes(MemoryCategory::kGradients).set(62205952);
  m.memory_bytes(MemoryCategory::kOptimizerState).set(995295232);
  m.memory_bytes(MemoryCategory::kRss).set(1906311168);
  m.collective_bytes_total("all_gather").add(248823808);
  m.collective_bytes_total("reduce_scatter").add(248823808);
}

}  // namespace

int main(int argc, char** argv) {
  zero::metrics::Registry registry;
  zero::metrics::TrainingMetrics metrics(registry, 0, "gpt2-demo");
  std::mt19937 rng(1234);
  pretend_step(metrics, 1, rng);
  if (argc == 1) {
    std::fputs(registry.render().c_str(), stdout);
    return 0;
  }
  if (argc != 3 || std::strcmp(argv[1], "--port") != 0) {
    std::fprintf(stderr, "usage: %s [--port PORT]\n", argv[0]);
    return 2;
  }
  try {
    zero::metrics::MetricsServer server(registry, "127.0.0.1", std::atoi(argv[2]));
    std::printf("serving http://127.0.0.1:%d/metrics; Ctrl-C stops\n", server.port());
    std::fflush(stdout);
    std::signal(SIGINT, request_stop);
    std::signal(SIGTERM, request_stop);
    for (int step = 2; !g_stop; ++step) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      pretend_step(metrics, step, rng);
    }
  } catch (const zero::Error& e) {
    std::fprintf(stderr, "metrics_demo: %s\n", e.what());
    return 1;
  }
  return 0;
}
