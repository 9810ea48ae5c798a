// CsvMonitor: DeepSpeed's csv_monitor.py, byte for byte (read, not copied; see zero/monitor.h).
#include <string>

#include "monitor/append_file.h"
#include "monitor/python_float.h"
#include "zero/monitor.h"

namespace zero::monitor {
namespace {

// Python's csv.writer (excel dialect, QUOTE_MINIMAL): a field with a comma, a quote or a line
// break goes in quotes, inner quotes doubled. Only the header can need it: steps and values are
// numbers.
std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

// DeepSpeed names the column after the last part of "Train/Samples/lr": "lr".
std::string_view header_name(std::string_view event_name) {
  size_t slash = event_name.rfind('/');
  return slash == std::string_view::npos ? event_name : event_name.substr(slash + 1);
}

}  // namespace

CsvMonitor::CsvMonitor(const MonitorConfig& config) : dir_(log_dir(config)) { create_log_dir(dir_, "csv_monitor"); }

std::string CsvMonitor::file_stem(std::string_view event_name) {
  std::string stem(event_name);
  for (char& c : stem) {
    if (c == '/' || c == ' ') c = '_';
  }
  return stem;
}

void CsvMonitor::write_events(const std::vector<Event>& events) {
  // One open-append-close per event, as DeepSpeed does: each row is on disk when we return, and
  // no descriptor stays open per metric.
  for (const Event& event : events) {
    std::string stem = file_stem(event.name);
    std::string text;
    // Note: the header is keyed by the file (the sanitized name), as in DeepSpeed: two names that
    // map to one file share the first one's header.
    bool first_write = !stems_with_header_.contains(stem);
    if (first_write) text = "step," + csv_field(header_name(event.name)) + "\r\n";
    text += std::to_string(event.step) + "," + python_float_repr(event.value) + "\r\n";

    AppendFile file = AppendFile::open_or_create(dir_ / (stem + ".csv"));
    file.append(text);
    file.close();
    if (first_write) stems_with_header_.insert(stem);
  }
}

}  // namespace zero::monitor
