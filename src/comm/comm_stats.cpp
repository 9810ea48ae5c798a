// CommStats (include/zero/comm_stats.h): the counts CountingCommunicator records, per
// collective and message size, behind one mutex.
#include "zero/comm_stats.h"

namespace zero {

void CommStats::add(CollectiveOp op, int64_t elements, int64_t message_bytes, double bus_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  OpStats& s = stats_[{op, message_bytes}];
  s.calls += 1;
  s.elements += elements;
  s.message_bytes += message_bytes;
  s.bus_bytes += bus_bytes;
}

void CommStats::add_time(CollectiveOp op, int64_t message_bytes, double bus_bytes, double seconds) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_[{op, message_bytes}].seconds += seconds;
  }
  if (listener_) listener_({op, message_bytes, bus_bytes, seconds});
}

void CommStats::set_listener(std::function<void(const CollectiveRecord&)> listener) {
  std::lock_guard<std::mutex> lock(mutex_);
  listener_ = std::move(listener);
}

OpStats CommStats::total(CollectiveOp op) const {
  std::lock_guard<std::mutex> lock(mutex_);
  OpStats sum;
  for (const auto& [key, s] : stats_) {
    if (key.first != op) continue;
    sum.calls += s.calls;
    sum.elements += s.elements;
    sum.message_bytes += s.message_bytes;
    sum.bus_bytes += s.bus_bytes;
    sum.seconds += s.seconds;
  }
  return sum;
}

std::map<std::pair<CollectiveOp, int64_t>, OpStats> CommStats::by_size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CommStats::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.clear();
}

}  // namespace zero
