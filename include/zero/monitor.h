// zero::monitor — DeepSpeed's event monitors: `csv_monitor` and `tensorboard` (torch-free).
//
// A training loop hands a batch of scalar events to every enabled monitor:
//
//   zero::monitor::MonitorMaster monitor(config, global_rank);   // no-op unless rank 0 and enabled
//   if (monitor.enabled())
//     monitor.write_events({{"Train/Samples/lr", lr, global_samples},
//                           {"Train/Samples/loss_scale", loss_scale, global_samples}});
//
// DeepSpeed's engine names its events "Train/Samples/<what>": lr and (fp16) loss_scale after each
// optimizer step, elapsed_time_ms_{forward,backward,backward_inner,backward_allreduce,step} with
// wall_clock_breakdown, train_loss from its pipeline engine. The step of each is global_samples,
// the number of samples trained so far, counted after the optimizer step.
//
// Both monitors write under log_dir(config) = output_path/job_name, as DeepSpeed does (an empty
// output_path puts job_name in the working directory). Each batch reaches the files before
// write_events returns, so a reader (tail, TensorBoard) sees it during training.
//
// Errors: a directory that cannot be created fails the constructor; a failed write (disk full,
// unwritable file) fails write_events. Both throw zero::Error naming the path. Catching is the
// caller's choice: a lost metric may or may not be worth stopping a run for.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "zero/config.h"

namespace zero::monitor {

// One scalar at one step, DeepSpeed's (log_name, value, step) tuple.
struct Event {
  std::string name;  // "Train/Samples/lr"
  double value = 0;
  int64_t step = 0;  // DeepSpeed: global samples
};

class Monitor {
 public:
  virtual ~Monitor() = default;
  virtual void write_events(const std::vector<Event>& events) = 0;
};

// The directory a monitor writes to: output_path/job_name (DeepSpeed's os.path.join).
std::filesystem::path log_dir(const MonitorConfig& config);

// One CSV file per event name, in DeepSpeed's layout (csv_monitor.py):
//   <log_dir>/Train_Samples_lr.csv   ('/' and ' ' in the name become '_')
//   step,lr                          (header: the part of the name after its last '/')
//   8,0.001                          (step, then the value as Python's repr(float) prints it)
// Rows end in "\r\n" (Python's csv module). Files are appended to; like DeepSpeed, a monitor
// writes the header the first time *it* writes a file, so a restarted run appends a new header.
// The monitor ignores config.enabled: constructing one means writing (MonitorMaster decides).
class CsvMonitor final : public Monitor {
 public:
  explicit CsvMonitor(const MonitorConfig& config);  // creates log_dir(config)
  void write_events(const std::vector<Event>& events) override;

  const std::filesystem::path& dir() const { return dir_; }
  // "Train/Samples/lr" -> "Train_Samples_lr" (the file is that plus ".csv").
  static std::string file_stem(std::string_view event_name);

 private:
  std::filesystem::path dir_;
  std::set<std::string> stems_with_header_;
};

class AppendFile;  // private (src/monitor/append_file.h)

// A TensorBoard event file, as torch.utils.tensorboard.SummaryWriter writes it for DeepSpeed:
//   <log_dir>/events.out.tfevents.<10-digit seconds>.<hostname>.<pid>.<n>
// (n: the first number whose file does not exist yet). The file starts with a file_version
// "brain.Event:2" event; every scalar is one Event { wall_time, step, summary { value { tag,
// simple_value } } } in its own record. simple_value is a float: values are rounded to float32.
// Ignores config.enabled, like CsvMonitor.
class TensorBoardMonitor final : public Monitor {
 public:
  explicit TensorBoardMonitor(const MonitorConfig& config);  // creates the dir and the file
  ~TensorBoardMonitor() override;
  TensorBoardMonitor(const TensorBoardMonitor&) = delete;
  TensorBoardMonitor& operator=(const TensorBoardMonitor&) = delete;

  // All events of a batch share one wall_time and go to the file in one write.
  void write_events(const std::vector<Event>& events) override;
  const std::filesystem::path& file() const;

 private:
  std::unique_ptr<AppendFile> file_;
};

// The fan-out DeepSpeed calls MonitorMaster: one monitor per enabled block of the config
// (tensorboard, csv_monitor), created only on global rank 0 (DeepSpeed writes nowhere else).
// wandb and comet need a network service and are not supported (the config reader warns).
class MonitorMaster final : public Monitor {
 public:
  MonitorMaster(const Config& config, int global_rank);

  // True when this rank writes to at least one monitor; callers may skip building events.
  // (DeepSpeed's `enabled` is true on every rank; its engine also checks the rank.)
  bool enabled() const { return !monitors_.empty(); }
  void write_events(const std::vector<Event>& events) override;

 private:
  std::vector<std::unique_ptr<Monitor>> monitors_;
};

}  // namespace zero::monitor
