// The sinks of Telemetry (telemetry.h): DeepSpeed's event monitors (CSV, TensorBoard) on rank 0
// and the Prometheus endpoint on every rank (metrics_sink.cpp).
#include <cmath>

#include "engine/telemetry.h"
#include "zero/monitor.h"

namespace zero::engine {

std::unique_ptr<StepSink> make_metrics_sink(const Config& config, World& world, bool tensor_parallel,
                                            bool experts);  // metrics_sink.cpp

namespace {

// DeepSpeed's event names and step (global samples after the optimizer step).
class MonitorSink : public StepSink {
 public:
  MonitorSink(const Config& config, int rank) : config_(config), monitors_(config, rank) {}
  bool enabled() const { return monitors_.enabled(); }

  void on_step(const StepRecord& r) override {
    std::vector<monitor::Event> events;
    auto add = [&](const char* name, double value) { events.push_back({name, value, r.samples}); };
    if (!std::isnan(r.loss)) add("Train/Samples/train_loss", r.loss);
    add("Train/Samples/lr", r.lr);
    if (config_.fp16.enabled) add("Train/Samples/loss_scale", r.loss_scale);
    add("Train/Samples/grad_norm", r.grad_norm);  // zerocpp's: the norm DeepSpeed's engine logs to stdout
    if (config_.wall_clock_breakdown) {
      const StepBreakdown& b = r.breakdown;
      add("Train/Samples/elapsed_time_ms_forward", b.forward * 1e3);
      add("Train/Samples/elapsed_time_ms_backward", b.backward * 1e3);
      add("Train/Samples/elapsed_time_ms_backward_inner", b.backward_inner * 1e3);
      add("Train/Samples/elapsed_time_ms_backward_allreduce", b.backward_reduce * 1e3);
      add("Train/Samples/elapsed_time_ms_step", b.step * 1e3);
    }
    monitors_.write_events(events);
  }

 private:
  const Config& config_;
  monitor::MonitorMaster monitors_;
};

}  // namespace

std::vector<std::unique_ptr<StepSink>> make_sinks(const Config& config, World& world, bool tensor_parallel,
                                                  bool experts) {
  std::vector<std::unique_ptr<StepSink>> sinks;
  auto monitors = std::make_unique<MonitorSink>(config, world.process_rank());
  if (monitors->enabled()) sinks.push_back(std::move(monitors));
  if (config.prometheus.enabled) sinks.push_back(make_metrics_sink(config, world, tensor_parallel, experts));
  return sinks;
}

}  // namespace zero::engine
