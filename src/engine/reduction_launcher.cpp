#include "engine/reduction_launcher.h"

#include <algorithm>

namespace zero::engine {

ReductionLauncher::ReductionLauncher(const layout::BucketLayout& layout, Launch launch)
    : layout_(layout), launch_(std::move(launch)), ready_(layout.buckets().size(), 0) {}

ReductionLauncher::~ReductionLauncher() { drain(true); }

void ReductionLauncher::begin() {
  std::fill(ready_.begin(), ready_.end(), 0);
  next_ = 0;
}

bool ReductionLauncher::arrive(int b) { return ++ready_[static_cast<size_t>(b)] == static_cast<int>(layout_.buckets()[static_cast<size_t>(b)].params.size()); }

bool ReductionLauncher::complete(int b) const {
  return ready_[static_cast<size_t>(b)] == static_cast<int>(layout_.buckets()[static_cast<size_t>(b)].params.size());
}

void ReductionLauncher::mark_complete(int b) {
  ready_[static_cast<size_t>(b)] = static_cast<int>(layout_.buckets()[static_cast<size_t>(b)].params.size());
}

void ReductionLauncher::launch_ready() {
  while (next_ < static_cast<int>(ready_.size()) && complete(next_)) pending_.push_back(launch_(next_++));
}

void ReductionLauncher::drain(bool all) {
  while (!pending_.empty()) {
    PendingReduction& front = pending_.front();
    if (all) {
      front.work->wait();
    } else if (!front.work->test()) {
      return;
    }
    if (front.finish) front.finish();
    pending_.pop_front();
  }
}

bool ReductionLauncher::finish_oldest() {
  if (pending_.empty()) return false;
  pending_.front().work->wait();
  if (pending_.front().finish) pending_.front().finish();
  pending_.pop_front();
  return true;
}

}  // namespace zero::engine
