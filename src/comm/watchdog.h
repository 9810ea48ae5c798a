// The collective watchdog: no stuck rank goes unseen. A thread per rank watches this process's
// collectives (src/comm/progress.h). When the training thread has waited in one collective for
// half the warning time it asks every other rank, over a duplicate of MPI_COMM_WORLD, where it
// stands; their watchdog threads answer even while their training threads compute or wait. After
// `warning_seconds` it prints a warning line; after `timeout_seconds` it prints an error naming
// the ranks that did not arrive (no answer: stopped or dead; running elsewhere; waiting in
// another collective or step) and ends the process with exit status 1 at once, without unwinding,
// so that nothing more is written (checkpoints included). The launcher then stops the others.
// Needs MPI_THREAD_MULTIPLE (World asks for it); without it the error cannot name other ranks.
#pragma once

#include <functional>
#include <memory>

namespace zero {
class World;
}

namespace zero::comm_detail {

struct WatchdogOptions {
  double timeout_seconds = 1800;  // 0: never end the job
  double warning_seconds = 60;    // 0: no warning
  // Called from the watchdog thread with how long the current collective has waited (0 when
  // none): the Prometheus gauge deepspeed:collective_wait_seconds.
  std::function<void(double)> on_wait;
};

class Watchdog {
 public:
  // Collective over the world. nullptr for a world of one, without MPI, or with both times 0.
  static std::unique_ptr<Watchdog> start(World& world, const WatchdogOptions& options);
  virtual ~Watchdog() = default;  // stops the thread
};

// The options from the config's values, overridden by ZERO_COLLECTIVE_TIMEOUT (seconds; set by
// `zero-run --timeout`).
WatchdogOptions watchdog_options(double config_timeout, double config_warning);

}  // namespace zero::comm_detail
