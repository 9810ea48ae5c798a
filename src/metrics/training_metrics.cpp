// TrainingMetrics: the names zerocpp exports, in one place. examples/prometheus/deepspeed_rules.yml
// alerts on several of them, so renaming one here means changing the rules too.
#include "zero/metrics.h"

namespace zero::metrics {
namespace {

Labels with(Labels labels, std::string name, std::string value) {
  labels.emplace_back(std::move(name), std::move(value));
  return labels;
}

constexpr const char* kMemoryHelp = "Bytes held per category on this rank (parameters, gradients, ...).";
constexpr const char* kCollectiveBytesHelp = "Bytes this rank sent in collectives, by operation and group.";
constexpr const char* kSwapHelp = "Bytes moved between memory and NVMe swap files, by direction.";
constexpr const char* kKnownOps[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all"};

}  // namespace

const char* to_string(MemoryCategory category) {
  static constexpr const char* kNames[kMemoryCategoryCount] = {
      "parameters", "gradients",  "master_weights", "optimizer_state", "buckets",
      "swap_buffers", "allocator_live", "allocator_peak", "rss"};
  return kNames[static_cast<int>(category)];
}

std::vector<double> collective_latency_buckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1,     2.5,    5,     10};
}

TrainingMetrics::TrainingMetrics(Registry& registry, int rank, const std::string& job_name)
    : registry_(registry),
      labels_{{"rank", std::to_string(rank)}, {"job_name", job_name}},
      step_time_seconds(registry.gauge("deepspeed:step_time_seconds", "Wall time of the last training step.", labels_)),
      optimizer_step_seconds(registry.gauge("deepspeed:optimizer_step_seconds",
                                            "Wall time of the last optimizer step.", labels_)),
      allgather_seconds(registry.histogram("deepspeed:allgather_seconds", "Latency of each parameter all-gather.",
                                           collective_latency_buckets(), labels_)),
      reduce_scatter_seconds(registry.histogram("deepspeed:reduce_scatter_seconds",
                                                "Latency of each gradient reduce-scatter.",
                                                collective_latency_buckets(), labels_)),
      grad_norm(registry.gauge("deepspeed:grad_norm", "Global gradient norm of the last step.", labels_)),
      samples_per_second(registry.gauge("deepspeed:samples_per_second",
                                        "Training samples per second over the last step.", labels_)),
      tokens_per_second(registry.gauge("deepspeed:tokens_per_second",
                                       "Training tokens per second over the last step.", labels_)),
      loss(registry.gauge("deepspeed:loss", "Training loss of the last step.", labels_)),
      lr(registry.gauge("deepspeed:lr", "Learning rate of the last step.", labels_)),
      loss_scale(registry.gauge("deepspeed:loss_scale", "Current dynamic loss scale (1 without fp16).", labels_)),
      skipped_steps_total(registry.counter("deepspeed:skipped_steps_total",
                                           "Steps skipped because the gradients overflowed.", labels_)),
      global_step(registry.gauge("deepspeed:global_step", "Optimizer steps taken, including restored ones.", labels_)),
      collective_wait_seconds(registry.gauge("deepspeed:collective_wait_seconds",
                                             "How long the collective in flight has waited; 0 when none.", labels_)),
      swap_bytes_read_total(registry.counter("deepspeed:swap_bytes_total", kSwapHelp, with(labels_, "direction", "read"))),
      swap_bytes_written_total(
          registry.counter("deepspeed:swap_bytes_total", kSwapHelp, with(labels_, "direction", "written"))) {
  for (int i = 0; i < kMemoryCategoryCount; ++i) {
    const char* category = to_string(static_cast<MemoryCategory>(i));
    memory_.push_back(&registry.gauge("deepspeed:memory_bytes", kMemoryHelp, with(labels_, "category", category)));
  }
  // Present from the start, so rate() has a zero to begin from.
  for (const char* op : kKnownOps) collective_bytes_total(op);
}

Counter& TrainingMetrics::collective_bytes_total(const std::string& op, const std::string& group) {
  return registry_.counter("deepspeed:collective_bytes_total", kCollectiveBytesHelp,
                           with(with(labels_, "op", op), "group", group));
}

}  // namespace zero::metrics
