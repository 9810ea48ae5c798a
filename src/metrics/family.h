// The registry's storage: a family (one metric name, its HELP, TYPE and label names) and its
// series (one label set each). Shared by registry.cpp, which creates them, and exposition.cpp,
// which renders them.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "zero/metrics.h"

namespace zero::metrics {

enum class MetricType { kGauge, kCounter, kHistogram };
const char* to_string(MetricType type);  // the word on the # TYPE line

// One label set of a family. Exactly one of the three instruments is set, per the family's type.
struct Series {
  Labels labels;
  std::unique_ptr<Gauge> gauge;
  std::unique_ptr<Counter> counter;
  std::unique_ptr<Histogram> histogram;
};

// Note: everything but `series` and `series_by_values` is fixed when the family is created, so a
// render may read it without the registry's lock; the two containers are guarded by that lock.
struct Family {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<std::string> label_names;
  std::vector<double> upper_bounds;  // histograms only
  std::vector<std::unique_ptr<Series>> series;           // in creation order, for rendering
  std::unordered_map<std::string, Series*> series_by_values;  // key: label values joined by '\0'
};

}  // namespace zero::metrics
