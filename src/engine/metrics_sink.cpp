// The Prometheus sink of Telemetry: every rank serves its own series on prometheus.port + its
// local rank (labelled rank and job_name), updated after each optimizer step and, for the
// collective latencies, after each collective. Nothing here waits for a scrape (metrics.h).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/telemetry.h"
#include "zero/metrics.h"

namespace zero::engine {
namespace {

class MetricsSink : public StepSink {
 public:
  MetricsSink(const Config& config, World& world, bool tensor_parallel, bool experts)
      : experts_(experts),
        metrics_(registry_, world.process_rank(), config.prometheus.job_name),
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
    if (experts) {
      expert_sent_ = &metrics_.collective_bytes_total(to_string(CollectiveOp::kAllToAll), "expert_parallel");
      for (const char* part : {"router", "dispatch", "experts", "combine", "all_to_all"}) {
        moe_seconds_.push_back(&registry_.gauge("deepspeed:moe_seconds",
                                                "Seconds the MoE layers spent in the last step, by part (forward "
                                                "router, dispatch, experts, combine; the exchange's all-to-alls).",
                                                with(labels_, {{"part", part}})));
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
    if (experts_) experts(r);
  }

  void on_collective(const CollectiveRecord& r) override {
    if (r.op == CollectiveOp::kAllGather) metrics_.allgather_seconds.observe(r.seconds);
    if (r.op == CollectiveOp::kReduceScatter) metrics_.reduce_scatter_seconds.observe(r.seconds);
  }

  void on_wait(double seconds) override { metrics_.collective_wait_seconds.set(seconds); }

 private:
  // The MoE layers' series: the step's time by part, the exchange's bytes, and each layer's load —
  // tokens per expert, and the busiest expert's tokens over the mean (1: balanced; the step waits
  // for the busiest rank's experts).
  void experts(const StepRecord& r) {
    const StepBreakdown& b = r.breakdown;
    const double seconds[] = {b.moe_router, b.moe_dispatch, b.moe_experts, b.moe_combine, b.expert_all_to_all};
    for (size_t i = 0; i < moe_seconds_.size(); ++i) moe_seconds_[i]->set(seconds[i]);
    advance(*expert_sent_, expert_sent_before_, r.expert_all_to_all_bus_bytes);
    for (const ExpertStep::Layer& layer : r.expert_load) {
      const std::string l = std::to_string(layer.layer);
      int64_t total = 0, busiest = 0;
      for (size_t e = 0; e < layer.tokens.size(); ++e) {
        registry_
            .gauge("deepspeed:moe_tokens_per_expert", "Tokens routed to each expert from this rank in the last step.",
                   with(labels_, {{"layer", l}, {"expert", std::to_string(e)}}))
            .set(static_cast<double>(layer.tokens[e]));
        total += layer.tokens[e];
        busiest = std::max(busiest, layer.tokens[e]);
      }
      const double mean = static_cast<double>(total) / static_cast<double>(std::max<size_t>(1, layer.tokens.size()));
      registry_
          .gauge("deepspeed:moe_load_imbalance",
                 "The busiest expert's tokens over the mean in the last step, per MoE layer (1: balanced).",
                 with(labels_, {{"layer", l}}))
          .set(mean > 0 ? static_cast<double>(busiest) / mean : 1.0);
    }
  }

  static metrics::Labels with(metrics::Labels labels, const metrics::Labels& more) {
    labels.insert(labels.end(), more.begin(), more.end());
    return labels;
  }

  // Counters only grow: add what the running total gained since the last step.
  static void advance(metrics::Counter& counter, double& before, double now) {
    if (now > before) counter.add(now - before);
    before = now;
  }

  bool experts_;
  metrics::Registry registry_;
  metrics::TrainingMetrics metrics_;
  metrics::Labels labels_;
  metrics::Gauge& flops_;
  std::array<metrics::Counter*, 6> sent_{};
  std::array<double, 6> sent_before_{};
  std::array<metrics::Counter*, 6> layer_sent_{};  // the tensor-parallel group's, when there is one
  std::array<double, 6> layer_sent_before_{};
  double skipped_ = 0, read_ = 0, written_ = 0;
  std::vector<metrics::Gauge*> moe_seconds_;     // by part (experts_ only)
  metrics::Counter* expert_sent_ = nullptr;     // the expert-parallel exchange's all-to-all bytes
  double expert_sent_before_ = 0;
  metrics::MetricsServer server_;  // last: it stops serving before the registry goes
};

}  // namespace

std::unique_ptr<StepSink> make_metrics_sink(const Config& config, World& world, bool tensor_parallel, bool experts) {
  return std::make_unique<MetricsSink>(config, world, tensor_parallel, experts);
}

}  // namespace zero::engine
