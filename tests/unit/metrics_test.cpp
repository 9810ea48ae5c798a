// zero::metrics: the registry and its text exposition format, byte for byte.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>

#include "metrics/exposition.h"
#include "zero/error.h"
#include "zero/metrics.h"

namespace zero::metrics {
namespace {

const Labels kRank0 = {{"rank", "0"}, {"job_name", "gpt"}};

TEST(MetricsRender, Gauge) {
  Registry registry;
  registry.gauge("deepspeed:loss", "Training loss.", kRank0).set(2.5);
  registry.gauge("deepspeed:loss", "Training loss.", {{"rank", "1"}, {"job_name", "gpt"}}).set(-3);
  EXPECT_EQ(registry.render(),
            "# HELP deepspeed:loss Training loss.\n"
            "# TYPE deepspeed:loss gauge\n"
            "deepspeed:loss{rank=\"0\",job_name=\"gpt\"} 2.5\n"
            "deepspeed:loss{rank=\"1\",job_name=\"gpt\"} -3\n");
}

TEST(MetricsRender, CounterWithoutLabels) {
  Registry registry;
  Counter& counter = registry.counter("steps_total", "Steps.");
  counter.add(3);
  counter.increment();
  EXPECT_EQ(registry.render(), "# HELP steps_total Steps.\n# TYPE steps_total counter\nsteps_total 4\n");
  EXPECT_THROW(counter.add(-1), Error);
  EXPECT_THROW(counter.add(std::nan("")), Error);
  EXPECT_EQ(counter.value(), 4);
}

TEST(MetricsRender, HistogramIsCumulativeWithInclusiveBounds) {
  Registry registry;
  Histogram& h = registry.histogram("deepspeed:allgather_seconds", "All-gather latency.", {0.125, 1}, kRank0);
  for (double v : {0.0625, 0.125, 0.5, 8.0}) h.observe(v);  // 0.125 == a bound: counted in le="0.125"
  h.observe(std::nan(""));                                  // ignored
  EXPECT_EQ(registry.render(),
            "# HELP deepspeed:allgather_seconds All-gather latency.\n"
            "# TYPE deepspeed:allgather_seconds histogram\n"
            "deepspeed:allgather_seconds_bucket{rank=\"0\",job_name=\"gpt\",le=\"0.125\"} 2\n"
            "deepspeed:allgather_seconds_bucket{rank=\"0\",job_name=\"gpt\",le=\"1\"} 3\n"
            "deepspeed:allgather_seconds_bucket{rank=\"0\",job_name=\"gpt\",le=\"+Inf\"} 4\n"
            "deepspeed:allgather_seconds_sum{rank=\"0\",job_name=\"gpt\"} 8.6875\n"
            "deepspeed:allgather_seconds_count{rank=\"0\",job_name=\"gpt\"} 4\n");
}

TEST(MetricsRender, HistogramWithoutLabels) {
  Registry registry;
  registry.histogram("h", "x", {1}).observe(2);
  EXPECT_EQ(registry.render(),
            "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 1\nh_sum 2\nh_count 1\n");
}

TEST(MetricsRender, EscapesLabelValuesAndHelp) {
  Registry registry;
  registry.gauge("g", "a \\ and\na \"quote\"", {{"path", "C:\\x \"y\"\nz"}}).set(1);
  EXPECT_EQ(registry.render(),
            "# HELP g a \\\\ and\\na \"quote\"\n"
            "# TYPE g gauge\n"
            "g{path=\"C:\\\\x \\\"y\\\"\\nz\"} 1\n");
}

TEST(MetricsRender, SpecialAndExactValues) {
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
  // As Go's strconv.FormatFloat(v, 'g', -1, 64): shortest round-trip digits, exponent form
  // below 1e-4 and from 1e6 on.
  EXPECT_EQ(format_value(0.0001), "0.0001");
  EXPECT_EQ(format_value(0.00025), "0.00025");
  EXPECT_EQ(format_value(0.00001), "1e-05");
  EXPECT_EQ(format_value(0.1 + 0.2), "0.30000000000000004");  // round-trips, unlike printf's %g
  EXPECT_EQ(format_value(123456), "123456");
  EXPECT_EQ(format_value(1e6), "1e+06");
  EXPECT_EQ(format_value(1073741824), "1.073741824e+09");
  EXPECT_EQ(format_value(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(format_value(0), "0");
}

TEST(MetricsRegistry, FamiliesInRegistrationOrderAndSeriesAreShared) {
  Registry registry;
  Gauge& b = registry.gauge("b", "B.");
  registry.counter("a_total", "A.");
  EXPECT_EQ(&registry.gauge("b", "B."), &b);
  b.add(1.5);
  b.add(1);
  EXPECT_EQ(registry.render(), "# HELP b B.\n# TYPE b gauge\nb 2.5\n# HELP a_total A.\n# TYPE a_total counter\na_total 0\n");
}

TEST(MetricsRegistry, RejectsWhatPrometheusWouldMisread) {
  Registry registry;
  registry.gauge("deepspeed:x", "X.", kRank0);
  auto throws_naming = [](auto&& register_it, const std::string& text) {
    try {
      register_it();
      ADD_FAILURE() << "no error; expected one mentioning " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  throws_naming([&] { registry.counter("deepspeed:x", "X.", kRank0); }, "is a gauge");
  throws_naming([&] { registry.gauge("deepspeed:x", "Other.", kRank0); }, "other HELP");
  throws_naming([&] { registry.gauge("deepspeed:x", "X.", {{"rank", "0"}}); }, "other label names");
  throws_naming([&] { registry.gauge("1x", "X."); }, "invalid metric name '1x'");
  throws_naming([&] { registry.gauge("a-b", "X."); }, "invalid metric name");
  throws_naming([&] { registry.gauge("g", "X.", {{"__name", "v"}}); }, "invalid label name");
  throws_naming([&] { registry.gauge("g", "X.", {{"a:b", "v"}}); }, "invalid label name");
  throws_naming([&] { registry.gauge("g", "X.", {{"a", "v"}, {"a", "w"}}); }, "given twice");
  throws_naming([&] { registry.histogram("h", "X.", {1}, {{"le", "1"}}); }, "label 'le'");
  throws_naming([&] { registry.histogram("h", "X.", {1, 1}); }, "strictly increasing");
  throws_naming([&] { registry.histogram("h", "X.", {1, INFINITY}); }, "finite");
  registry.histogram("h", "X.", {1, 2});
  throws_naming([&] { registry.histogram("h", "X.", {1, 3}); }, "other bucket bounds");
}

TEST(MetricsRegistry, RenderWhileAnotherThreadUpdates) {
  Registry registry;
  Histogram& h = registry.histogram("h", "X.", {1});
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop) h.observe(0.5);
  });
  for (int i = 0; i < 200; ++i) {
    const std::string text = registry.render();
    // The cumulative counts are read once: le="1" and +Inf and _count agree in every render.
    const auto le1 = text.find("h_bucket{le=\"1\"} ");
    const auto inf = text.find("h_bucket{le=\"+Inf\"} ");
    const auto count = text.find("h_count ");
    ASSERT_NE(count, std::string::npos);
    const auto number_at = [&](size_t pos) { return text.substr(pos, text.find('\n', pos) - pos); };
    EXPECT_EQ(number_at(text.find(' ', le1) + 1), number_at(text.find(' ', inf) + 1));
    EXPECT_EQ(number_at(text.find(' ', inf) + 1), number_at(count + 8));
  }
  stop = true;
  writer.join();
}

TEST(TrainingMetrics, RegistersTheExportedNames) {
  Registry registry;
  TrainingMetrics m(registry, 3, "gpt2-zero3");
  m.loss.set(2.25);
  m.memory_bytes(MemoryCategory::kOptimizerState).set(1024);
  m.collective_bytes_total("all_gather").add(4096);
  m.collective_bytes_total("send").add(8);  // an op not known in advance
  m.swap_bytes_written_total.add(512);
  m.allgather_seconds.observe(0.0003);
  const std::string text = registry.render();
  const std::string labels = "{rank=\"3\",job_name=\"gpt2-zero3\"";
  for (const std::string line : {
           "# TYPE deepspeed:step_time_seconds gauge", "# TYPE deepspeed:optimizer_step_seconds gauge",
           "# TYPE deepspeed:allgather_seconds histogram", "# TYPE deepspeed:reduce_scatter_seconds histogram",
           "# TYPE deepspeed:grad_norm gauge", "# TYPE deepspeed:samples_per_second gauge",
           "# TYPE deepspeed:tokens_per_second gauge", "# TYPE deepspeed:lr gauge", "# TYPE deepspeed:loss_scale gauge",
           "# TYPE deepspeed:skipped_steps_total counter", "# TYPE deepspeed:global_step gauge",
           "# TYPE deepspeed:collective_wait_seconds gauge", "# TYPE deepspeed:memory_bytes gauge",
           "# TYPE deepspeed:collective_bytes_total counter", "# TYPE deepspeed:swap_bytes_total counter"}) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line;
  }
  for (const std::string& sample : {
           "deepspeed:loss" + labels + "} 2.25", "deepspeed:memory_bytes" + labels + ",category=\"optimizer_state\"} 1024",
           "deepspeed:memory_bytes" + labels + ",category=\"rss\"} 0",
           "deepspeed:collective_bytes_total" + labels + ",op=\"all_gather\",group=\"data_parallel\"} 4096",
           "deepspeed:collective_bytes_total" + labels + ",op=\"reduce_scatter\",group=\"data_parallel\"} 0",
           "deepspeed:collective_bytes_total" + labels + ",op=\"send\",group=\"data_parallel\"} 8",
           "deepspeed:swap_bytes_total" + labels + ",direction=\"written\"} 512",
           "deepspeed:swap_bytes_total" + labels + ",direction=\"read\"} 0",
           "deepspeed:allgather_seconds_bucket" + labels + ",le=\"0.0001\"} 0",
           "deepspeed:allgather_seconds_bucket" + labels + ",le=\"0.0005\"} 1",
           "deepspeed:allgather_seconds_bucket" + labels + ",le=\"10\"} 1",
           "deepspeed:allgather_seconds_bucket" + labels + ",le=\"+Inf\"} 1"}) {
    EXPECT_NE(text.find(sample + "\n"), std::string::npos) << sample;
  }
  EXPECT_STREQ(to_string(MemoryCategory::kMasterWeights), "master_weights");
  EXPECT_STREQ(to_string(MemoryCategory::kRss), "rss");
}

}  // namespace
}  // namespace zero::metrics
