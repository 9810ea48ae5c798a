#include "zero/monitor.h"

namespace zero::monitor {

std::filesystem::path log_dir(const MonitorConfig& config) {
  // os.path.join semantics: "" / job -> job (the working directory); an absolute job_name wins.
  return std::filesystem::path(config.output_path) / config.job_name;
}

MonitorMaster::MonitorMaster(const Config& config, int global_rank) {
  if (global_rank != 0) return;
  if (config.tensorboard.enabled) monitors_.push_back(std::make_unique<TensorBoardMonitor>(config.tensorboard));
  if (config.csv_monitor.enabled) monitors_.push_back(std::make_unique<CsvMonitor>(config.csv_monitor));
}

void MonitorMaster::write_events(const std::vector<Event>& events) {
  for (auto& monitor : monitors_) monitor->write_events(events);
}

}  // namespace zero::monitor
