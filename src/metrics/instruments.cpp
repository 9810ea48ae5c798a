// Gauge, Counter and Histogram: the updates the training thread makes. Relaxed atomics only —
// a scrape reads whatever values are there, and no update orders anything else.
#include <algorithm>
#include <cmath>

#include "zero/error.h"
#include "zero/metrics.h"

namespace zero::metrics {

void Counter::add(double amount) {
  if (!(amount >= 0)) {
    throw Error("metrics: a counter cannot go down (add " + std::to_string(amount) + ")");
  }
  value_.fetch_add(amount, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      bucket_counts_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) bucket_counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double value) {
  if (std::isnan(value)) return;
  // The first bound >= value: `le` is inclusive. Past the last bound: the +Inf bucket.
  const size_t bucket = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin();
  bucket_counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot snap;
  snap.upper_bounds = upper_bounds_;
  snap.cumulative_counts.reserve(upper_bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    running += bucket_counts_[i].load(std::memory_order_relaxed);
    snap.cumulative_counts.push_back(running);
  }
  snap.count = running;
  snap.sum = sum_.load(std::memory_order_relaxed);
  return snap;
}

}  // namespace zero::metrics
