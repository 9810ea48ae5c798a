// zero::metrics — Prometheus metrics for a training job: a registry of gauges, counters and
// histograms, rendered in the text exposition format 0.0.4, and an HTTP server for GET /metrics.
//
// Torch-free. The training thread updates metrics with relaxed atomics only: an update never
// takes a lock and never waits on a scrape. Registering a metric or a new label set takes the
// registry's lock, which a scrape holds only while it copies pointers, never while it formats or
// writes to a socket. Families and series are never removed, so the references handed out stay
// valid for the registry's lifetime. docs/observability.md shows the output and the alert rules.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zero::metrics {

// Label name/value pairs, rendered in the order given. Every series of a family must use the same
// label names in the same order; values may hold any UTF-8 (they are escaped on output).
using Labels = std::vector<std::pair<std::string, std::string>>;

// The Content-Type of Registry::render()'s output.
inline constexpr const char* kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

// A value that goes up and down: the last step time, the loss.
class Gauge {
 public:
  void set(double value) { value_.store(value, std::memory_order_relaxed); }
  void add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A total that only goes up (Prometheus treats a decrease as a process restart).
class Counter {
 public:
  // Throws zero::Error for a negative or NaN amount.
  void add(double amount);
  void increment() { value_.fetch_add(1.0, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Counts observations into buckets with explicit upper bounds (an observation equal to a bound
// falls into that bucket, as Prometheus's `le` says); the +Inf bucket is implicit.
class Histogram {
 public:
  // `upper_bounds`: finite and strictly increasing (Registry checks this before constructing).
  explicit Histogram(std::vector<double> upper_bounds);

  // NaN is ignored: it would turn _sum into NaN for the rest of the job.
  void observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;         // without +Inf
    std::vector<uint64_t> cumulative_counts;  // one per bound, then +Inf (== count)
    double sum = 0;
    uint64_t count = 0;
  };
  // Note: read while observe() may run, so `sum` can lag the counts by an observation; the
  // counts themselves are always consistent (count is computed from the buckets read).
  Snapshot snapshot() const;

 private:
  std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> bucket_counts_;  // per bucket, not cumulative; +Inf last
  std::atomic<double> sum_{0.0};
};

// Owns every metric. Non-copyable; outlives any MetricsServer serving it.
class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Get-or-create the series `name{labels}`. The first call for a name creates the family with its
  // HELP text; later calls must agree on type, help, label names (and bucket bounds), else
  // zero::Error. Names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* without
  // a leading "__"; histograms may not use the label "le". Takes the registry's lock: look a
  // series up once and keep the reference, rather than on every update.
  Gauge& gauge(std::string_view name, std::string_view help, const Labels& labels = {});
  Counter& counter(std::string_view name, std::string_view help, const Labels& labels = {});
  Histogram& histogram(std::string_view name, std::string_view help, const std::vector<double>& upper_bounds,
                       const Labels& labels = {});

  // Every family that has a series, in registration order, in the text format 0.0.4.
  std::string render() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Where and how MetricsServer listens.
struct ServerOptions {
  std::string host = "127.0.0.1";  // "0.0.0.0" to let another machine's Prometheus scrape
  int port = 0;                    // 0 picks a free port; MetricsServer::port() says which
  // Limit on each wait for a client: for its request, for each read, for each blocked write. A
  // client that connects and never sends holds one worker this long; one that never reads its
  // response, up to about twice this long (one blocked send, then one wait to send more).
  std::chrono::seconds client_timeout{3};
  // Connections served at once; more wait in the queue. A few, so that one stuck client never
  // holds up the next scrape.
  int worker_threads = 4;
};

// Serves GET /metrics (the registry rendered at request time) on background threads; any other
// path is 404. Nothing here runs on or waits for the training thread.
class MetricsServer {
 public:
  // Binds before returning: throws zero::Error naming host:port if that fails (in use, bad host).
  MetricsServer(const Registry& registry, ServerOptions options);
  MetricsServer(const Registry& registry, const std::string& host, int port);
  // Stops accepting and joins the workers: returns within about twice client_timeout even while
  // a client that never reads or never sends is connected.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }  // the bound port (the chosen one when asked for 0)
  const std::string& host() const { return options_.host; }

 private:
  struct Listener;
  ServerOptions options_;
  int port_ = 0;
  std::unique_ptr<Listener> listener_;
};

// What deepspeed:memory_bytes{category=...} reports.
enum class MemoryCategory {
  kParameters, kGradients, kMasterWeights, kOptimizerState, kBuckets, kSwapBuffers,
  kAllocatorLive, kAllocatorPeak, kRss,
};
inline constexpr int kMemoryCategoryCount = 9;
const char* to_string(MemoryCategory category);  // "parameters", "master_weights", ...

// Bucket bounds for collective latencies: 100 µs to 10 s, 1-2.5-5 per decade.
std::vector<double> collective_latency_buckets();

// The metrics zerocpp exports, registered with their HELP text so the names live in one place
// (examples/prometheus/deepspeed_rules.yml alerts on them). Every series carries the labels
// rank and job_name. Gauges start at 0; the engine sets them after each step.
class TrainingMetrics {
  Registry& registry_;  // first: the members below are initialized from it
  Labels labels_;       // {rank, job_name}
  std::vector<Gauge*> memory_;

 public:
  TrainingMetrics(Registry& registry, int rank, const std::string& job_name);
  TrainingMetrics(const TrainingMetrics&) = delete;
  TrainingMetrics& operator=(const TrainingMetrics&) = delete;

  Gauge& step_time_seconds;       // deepspeed:step_time_seconds, the last step
  Gauge& optimizer_step_seconds;  // deepspeed:optimizer_step_seconds, the last optimizer step
  Histogram& allgather_seconds;   // deepspeed:allgather_seconds, each all-gather's latency
  Histogram& reduce_scatter_seconds;
  Gauge& grad_norm;
  Gauge& samples_per_second;
  Gauge& tokens_per_second;
  Gauge& loss;
  Gauge& lr;
  Gauge& loss_scale;
  Counter& skipped_steps_total;  // steps skipped for overflow
  Gauge& global_step;
  Gauge& collective_wait_seconds;  // how long the collective in flight has waited; 0 when none
  Counter& swap_bytes_read_total;     // deepspeed:swap_bytes_total{direction="read"}
  Counter& swap_bytes_written_total;  // deepspeed:swap_bytes_total{direction="written"}

  Gauge& memory_bytes(MemoryCategory category) { return *memory_[static_cast<int>(category)]; }
  // deepspeed:collective_bytes_total{op, group}: bytes this rank sent in the group's collectives
  // ("data_parallel": the engine's, over the whole world without tensor parallelism;
  // "tensor_parallel": the layers'). all_reduce, reduce_scatter, all_gather, broadcast and
  // all_to_all of the data-parallel group exist from the start; another series is registered on
  // first use. Takes the registry's lock: keep the reference.
  Counter& collective_bytes_total(const std::string& op, const std::string& group = "data_parallel");
};

}  // namespace zero::metrics
