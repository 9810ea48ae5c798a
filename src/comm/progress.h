// Where this process stands with its collectives, for the watchdog (src/comm/watchdog.h): whether
// a thread is blocked in one right now (waiting for a collective to complete, or in a blocking
// collective, its consistency check included), in which, since when, and the training step.
// The MPI backend marks its blocking points with a BlockedScope; the engine sets the step.
// Torch-free and MPI-free; each update is one short mutex section (a few per collective).
#pragma once

#include <cstdint>
#include <string>

namespace zero::comm_detail {

// Marks the calling thread as blocked in collective `what` ("all_reduce", ...) while it lives.
// Nested scopes (a wait inside a wait) keep the outermost.
class BlockedScope {
 public:
  explicit BlockedScope(const char* what);
  ~BlockedScope();
  BlockedScope(const BlockedScope&) = delete;
  BlockedScope& operator=(const BlockedScope&) = delete;
};

// The training step in progress (1-based), as the engine counts it.
void set_progress_step(int64_t step);

struct ProgressSnapshot {
  bool blocked = false;
  std::string what;        // the collective it is blocked in (when blocked), else the last one
  double seconds = 0;      // how long it has been blocked
  int64_t step = 0;        // the step in progress
  int64_t episodes = 0;    // blocking episodes so far: a new value is a new wait
};
ProgressSnapshot progress_snapshot();

}  // namespace zero::comm_detail
