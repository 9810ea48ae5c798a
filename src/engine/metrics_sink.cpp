// The Prometheus sink of Telemetry: every rank serves its own series on prometheus.port + its
// local rank (labelled rank and job_name), updated after each optimizer step and, for the
// collective latencies, after each collective. Nothing here waits for a scrape (metrics.h).
#include <fmt/core.h>

#include <cmath>
#include <cstdio>

#include "engine/telemetry.h"
#include "zero/metrics.h"

namespace zero::engine {
namespace {

class MetricsSink : public StepSink {
 public:
  MetricsSink(const Config& config, World& world, bool tensor_parallel)
      : metrics_(registry_, world.process_rank(), config.prometheus.job_name),
        labels_{{"rank", std::to_string(world.process_rank())}, {"job_name", config.prometheus.job_name}},
        flops_(registry_.gauge("deepspeed:model_flops_per_second", "model FLOP/s of this rank in the last step", labels_)),
        server_(registry_, config.prometheus.host,
                config.prometheus.port == 0 ? 0 : config.prometheus.port + world.process_local_rank()) {
    for (CollectiveOp op : {CollectiveOp::kAllReduce, CollectiveOp::kReduceScatter, CollectiveOp::kAllGather,
                            CollectiveOp::kBroadcast, CollectiveOp::kAllToAll}) {
      sent_[static_cast<size_t>(op)] = &metrics_.collective_bytes_total(to_string(op));
    }
    if (tensor_parallel) {  // the layers' collectives: all-reduces, and with sequence parallelism the others
      for (CollectiveOp op : {CollectiveOp::kAllReduce, CollectiveOp::kReduceScatter, CollectiveOp::kAllGather}) {
        layer_sent_[static_cast<size_t>(op)] = &metrics_.collective_bytes_total(to_string(op), "tensor_parallel");
      }
    }
    std::fprintf(stderr, "zerocpp: rank %d serves Prometheus metrics at http://%s:%d/metrics\n", world.process_rank(),
                 server_.host().c_str(), server_.port());
  }

  void on_step(const StepRecord& r) override {
    metrics_.step_time_seconds.set(r.breakdown.wall);
    metrics_.optimizer_step_seconds.set(r.breakdown.optimizer);
    metrics_.grad_norm.set(r.grad_norm);
    metrics_.samples_per_second.set(r.samples_per_second);
    metrics_.tokens_per_second.set(r.tokens_per_second);
    if (!std::isnan(r.loss)) metrics_.loss.set(r.loss);
    metrics_.lr.set(r.lr);
    metrics_.loss_scale.set(r.loss_scale);
    metrics_.global_step.set(static_cast<double>(r.step));
    advance(metrics_.skipped_steps_total, skipped_, static_cast<double>(r.skipped_steps));
    advance(metrics_.swap_bytes_read_total, read_, static_cast<double>(r.swap.bytes_read));
    advance(metrics_.swap_bytes_written_total, written_, static_cast<double>(r.swap.bytes_written));
    for (size_t op = 0; op < sent_.size(); ++op) {
      if (sent_[op]) advance(*sent_[op], sent_before_[op], r.bus_bytes[op]);
      if (layer_sent_[op]) advance(*layer_sent_[op], layer_sent_before_[op], r.tensor_parallel_bus_bytes[op]);
    }
    using metrics::MemoryCategory;
    const MemoryReport& m = r.memory;
    auto memory = [&](MemoryCategory c, int64_t bytes) { metrics_.memory_bytes(c).set(static_cast<double>(bytes)); };
    memory(MemoryCategory::kParameters, m.parameters);
    memory(MemoryCategory::kGradients, m.gradients);
    memory(MemoryCategory::kMasterWeights, m.master_weights);
    memory(MemoryCategory::kOptimizerState, m.optimizer_state);
    memory(MemoryCategory::kBuckets, m.buckets);
    memory(MemoryCategory::kSwapBuffers, m.swap_buffers);
    memory(MemoryCategory::kAllocatorLive, r.allocator_live);
    memory(MemoryCategory::kAllocatorPeak, r.allocator_peak);
    memory(MemoryCategory::kRss, r.rss);
    flops_.set(r.flops_per_second);
  }

  void on_collective(const CollectiveRecord& r) override {
    if (r.op == CollectiveOp::kAllGather) metrics_.allgather_seconds.observe(r.seconds);
    if (r.op == CollectiveOp::kReduceScatter) metrics_.reduce_scatter_seconds.observe(r.seconds);
  }

  void on_wait(double seconds) override { metrics_.collective_wait_seconds.set(seconds); }

 private:
  // Counters only grow: add what the running total gained since the last step.
  static void advance(metrics::Counter& counter, double& before, double now) {
    if (now > before) counter.add(now - before);
    before = now;
  }

  metrics::Registry registry_;
  metrics::TrainingMetrics metrics_;
  metrics::Labels labels_;
  metrics::Gauge& flops_;
  std::array<metrics::Counter*, 6> sent_{};
  std::array<double, 6> sent_before_{};
  std::array<metrics::Counter*, 6> layer_sent_{};  // the tensor-parallel group's, when there is one
  std::array<double, 6> layer_sent_before_{};
  double skipped_ = 0, read_ = 0, written_ = 0;
  metrics::MetricsServer server_;  // last: it stops serving before the registry goes
};

}  // namespace

std::unique_ptr<StepSink> make_metrics_sink(const Config& config, World& world, bool tensor_parallel) {
  return std::make_unique<MetricsSink>(config, world, tensor_parallel);
}

}  // namespace zero::engine
