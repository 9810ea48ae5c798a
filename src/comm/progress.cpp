#include "comm/progress.h"

#include <chrono>
#include <mutex>

namespace zero::comm_detail {
namespace {

using Clock = std::chrono::steady_clock;

struct Progress {
  std::mutex mutex;
  int depth = 0;
  std::string what;
  Clock::time_point since;
  int64_t step = 0, episodes = 0;
};

Progress& progress() {
  static Progress p;
  return p;
}

}  // namespace

BlockedScope::BlockedScope(const char* what) {
  Progress& p = progress();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (p.depth++ > 0) return;
  p.what = what;
  p.since = Clock::now();
  ++p.episodes;
}

BlockedScope::~BlockedScope() {
  Progress& p = progress();
  std::lock_guard<std::mutex> lock(p.mutex);
  --p.depth;
}

void set_progress_step(int64_t step) {
  Progress& p = progress();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.step = step;
}

ProgressSnapshot progress_snapshot() {
  Progress& p = progress();
  std::lock_guard<std::mutex> lock(p.mutex);
  ProgressSnapshot s;
  s.blocked = p.depth > 0;
  s.what = p.what;
  s.seconds = s.blocked ? std::chrono::duration<double>(Clock::now() - p.since).count() : 0.0;
  s.step = p.step;
  s.episodes = p.episodes;
  return s;
}

}  // namespace zero::comm_detail
