// What zero-train's loop needs besides the engine: rank 0's report lines with a progress bar on
// a terminal, and SIGINT/SIGTERM turned into "stop after this step".
#pragma once

#include <fmt/core.h>
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace at {
class Tensor;
}
namespace zero {
class World;
}

namespace zero::gpt {

bool stop_requested();  // a stop signal arrived since the last clear_stop_request()
void clear_stop_request();
void note_stop_signal(int signal_number);  // the handler SignalScope installs
// `shared` is a step's [loss, stop flag], already summed over the data-parallel group. With tensor
// parallelism the flag must reach every member too (collective over `tensor_parallel`): a
// data-parallel group that stopped alone would leave the others waiting in the next step's layers.
void stop_anywhere(at::Tensor& shared, World& tensor_parallel);

// Prints rank 0's lines, keeping a progress bar as the last line of a terminal.
class Report {
 public:
  Report(std::FILE* out, bool bar, int64_t steps) : out_(out), bar_(bar), steps_(steps) {}
  void line(const std::string& text) {
    if (!out_) return;
    fmt::print(out_, "{}{}\n", bar_ ? "\r\033[K" : "", text);
    std::fflush(out_);
  }
  void progress(int64_t done, double step_seconds) {
    if (!out_ || !bar_) return;
    elapsed_ += step_seconds;
    const double seconds_per_step = elapsed_ / static_cast<double>(++timed_);
    const int width = 30, filled = static_cast<int>(width * done / steps_);
    const auto eta = static_cast<int64_t>(seconds_per_step * static_cast<double>(steps_ - done));
    fmt::print(out_, "\r[{}{}] {}/{} eta {}m{:02d}s", std::string(static_cast<size_t>(filled), '#'),
               std::string(static_cast<size_t>(width - filled), '.'), done, steps_, eta / 60, eta % 60);
    std::fflush(out_);
  }
  void finish() {
    if (out_ && bar_) fmt::print(out_, "\r\033[K");
  }

 private:
  std::FILE* out_;
  bool bar_;
  int64_t steps_;
  double elapsed_ = 0;
  int64_t timed_ = 0;  // steps run by this process (a resumed run starts later)
};

// While alive (and active), SIGINT and SIGTERM only set a flag that stop_requested() reads.
class SignalScope {
 public:
  explicit SignalScope(bool active) : active_(active) {
    if (!active_) return;
    clear_stop_request();
    struct sigaction action {};
    action.sa_handler = note_stop_signal;
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~SignalScope() {
    if (!active_) return;
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  bool active_;
  struct sigaction old_int_ {
  }, old_term_{};
};

}  // namespace zero::gpt
