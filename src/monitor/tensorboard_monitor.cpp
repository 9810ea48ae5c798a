#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "monitor/append_file.h"
#include "monitor/event_encoding.h"
#include "zero/monitor.h"

namespace zero::monitor {
namespace {

double seconds_since_epoch() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

// TensorBoard finds runs by the "tfevents" in the name; the rest keeps writers apart (PyTorch's
// SummaryWriter: seconds, host, pid, then a per-process counter; ours: the first free number).
AppendFile create_event_file(const std::filesystem::path& dir, double now) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%010lld", static_cast<long long>(now));
  std::string prefix = std::string("events.out.tfevents.") + seconds + "." + host_name() + "." +
                       std::to_string(::getpid()) + ".";
  for (int n = 0;; ++n) {
    if (auto file = AppendFile::create_new(dir / (prefix + std::to_string(n)))) return std::move(*file);
  }
}

}  // namespace

TensorBoardMonitor::TensorBoardMonitor(const MonitorConfig& config) {
  std::filesystem::path dir = log_dir(config);
  create_log_dir(dir, "tensorboard");
  double now = seconds_since_epoch();
  file_ = std::make_unique<AppendFile>(create_event_file(dir, now));
  file_->append(frame_record(encode_file_version_event(now)));
}

TensorBoardMonitor::~TensorBoardMonitor() = default;

const std::filesystem::path& TensorBoardMonitor::file() const { return file_->path(); }

void TensorBoardMonitor::write_events(const std::vector<Event>& events) {
  if (events.empty()) return;
  double now = seconds_since_epoch();
  std::string records;
  for (const Event& event : events) {
    records += frame_record(encode_scalar_event(now, event.step, event.name, static_cast<float>(event.value)));
  }
  file_->append(records);
}

}  // namespace zero::monitor
