// Registry: creating families and series (under the lock) and rendering them (the lock held only
// while the pointers are copied, so a slow scrape never delays a registration).
#include <cmath>
#include <mutex>

#include "metrics/exposition.h"
#include "metrics/family.h"
#include "zero/error.h"

namespace zero::metrics {

struct Registry::State {
  mutable std::mutex mutex;
  std::vector<std::unique_ptr<Family>> families;  // registration order
  std::unordered_map<std::string, Family*> families_by_name;
};

namespace {

bool is_name(std::string_view name, bool colons_allowed) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (colons_allowed && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::vector<std::string> label_names_of(std::string_view metric, const Labels& labels, MetricType type) {
  std::vector<std::string> names;
  for (const auto& [name, value] : labels) {
    if (!is_name(name, false) || name.starts_with("__")) {
      throw Error("metrics: invalid label name '" + name + "' on " + std::string(metric), std::string(metric));
    }
    if (type == MetricType::kHistogram && name == "le") {
      throw Error("metrics: histogram " + std::string(metric) + " cannot use the label 'le'", std::string(metric));
    }
    for (const auto& seen : names) {
      if (seen == name) throw Error("metrics: label '" + name + "' given twice on " + std::string(metric), std::string(metric));
    }
    names.push_back(name);
  }
  return names;
}

void check_bounds(std::string_view metric, const std::vector<double>& bounds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1]))) {
      throw Error("metrics: histogram " + std::string(metric) +
                      " needs finite, strictly increasing bucket bounds (+Inf is implicit)",
                  std::string(metric));
    }
  }
}

std::string key_of(const Labels& labels) {
  std::string key;
  for (const auto& [name, value] : labels) key += value + '\0';
  return key;
}

// The family `name`, created on first use; a later use must describe the same family.
Family& family_for(std::vector<std::unique_ptr<Family>>& families,
                   std::unordered_map<std::string, Family*>& by_name, std::string_view name, std::string_view help,
                   MetricType type, const Labels& labels, const std::vector<double>& bounds) {
  const std::string metric(name);
  if (!is_name(name, true)) throw Error("metrics: invalid metric name '" + metric + "'", metric);
  std::vector<std::string> label_names = label_names_of(name, labels, type);
  auto found = by_name.find(metric);
  if (found == by_name.end()) {
    check_bounds(name, bounds);
    auto family = std::make_unique<Family>();
    *family = Family{metric, std::string(help), type, std::move(label_names), bounds, {}, {}};
    by_name[metric] = family.get();
    families.push_back(std::move(family));
    return *families.back();
  }
  Family& family = *found->second;
  std::string mismatch;
  if (family.type != type) mismatch = std::string("is a ") + to_string(family.type);
  else if (family.help != help) mismatch = "has other HELP text: '" + family.help + "'";
  else if (family.label_names != label_names) mismatch = "has other label names";
  else if (family.upper_bounds != bounds) mismatch = "has other bucket bounds";
  if (!mismatch.empty()) throw Error("metrics: " + metric + " is already registered and " + mismatch, metric);
  return family;
}

// The series for these label values, created (without its instrument) on first use.
Series& series_for(Family& family, const Labels& labels) {
  auto [it, inserted] = family.series_by_values.try_emplace(key_of(labels), nullptr);
  if (inserted) {
    family.series.push_back(std::make_unique<Series>());
    family.series.back()->labels = labels;
    it->second = family.series.back().get();
  }
  return *it->second;
}

}  // namespace

Registry::Registry() : state_(std::make_unique<State>()) {}
Registry::~Registry() = default;

Gauge& Registry::gauge(std::string_view name, std::string_view help, const Labels& labels) {
  std::lock_guard lock(state_->mutex);
  Series& series = series_for(family_for(state_->families, state_->families_by_name, name, help,
                                         MetricType::kGauge, labels, {}),
                              labels);
  if (!series.gauge) series.gauge = std::make_unique<Gauge>();
  return *series.gauge;
}

Counter& Registry::counter(std::string_view name, std::string_view help, const Labels& labels) {
  std::lock_guard lock(state_->mutex);
  Series& series = series_for(family_for(state_->families, state_->families_by_name, name, help,
                                         MetricType::kCounter, labels, {}),
                              labels);
  if (!series.counter) series.counter = std::make_unique<Counter>();
  return *series.counter;
}

Histogram& Registry::histogram(std::string_view name, std::string_view help, const std::vector<double>& bounds,
                               const Labels& labels) {
  std::lock_guard lock(state_->mutex);
  Series& series = series_for(family_for(state_->families, state_->families_by_name, name, help,
                                         MetricType::kHistogram, labels, bounds),
                              labels);
  if (!series.histogram) series.histogram = std::make_unique<Histogram>(bounds);
  return *series.histogram;
}

std::string Registry::render() const {
  std::vector<std::pair<const Family*, std::vector<const Series*>>> copy;
  {
    std::lock_guard lock(state_->mutex);
    copy.reserve(state_->families.size());
    for (const auto& family : state_->families) {
      if (family->series.empty()) continue;
      std::vector<const Series*> series;
      series.reserve(family->series.size());
      for (const auto& s : family->series) series.push_back(s.get());
      copy.emplace_back(family.get(), std::move(series));
    }
  }
  std::string out;
  for (const auto& [family, series] : copy) append_family(out, *family, series);
  return out;
}

}  // namespace zero::metrics
