#include "launch/start_markers.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace zero::launch {
namespace {

// \x1f (the unit separator) never starts a line a program prints, so ordinary output is never held.
constexpr std::string_view kPrefix = "\x1fzero-run:started ";
// A "marker" with no end this long after its prefix is output after all: pass it on.
constexpr size_t kLongestMarker = 512;

}  // namespace

std::string start_marker(int rank, const std::string& host) {
  return fmt::format("{}{} {}\n", kPrefix, rank, host.empty() ? "-" : host);
}

std::string StartMarkerFilter::feed(std::string_view chunk) {
  std::string data = held_;
  data.append(chunk);
  held_.clear();
  std::string out;
  size_t pos = 0;
  for (;;) {
    const size_t marker = data.find(kPrefix, pos);
    if (marker == std::string::npos) break;
    const size_t end = data.find('\n', marker);
    out.append(data, pos, marker - pos);
    if (end == std::string::npos) {
      if (data.size() - marker > kLongestMarker) {  // not one of ours
        out.append(data, marker, std::string::npos);
        return out;
      }
      held_ = data.substr(marker);
      return out;
    }
    std::istringstream fields(data.substr(marker + kPrefix.size(), end - marker - kPrefix.size()));
    int rank = -1;
    std::string host;
    if (fields >> rank >> host && rank >= 0) started_[rank] = host == "-" ? "" : host;
    pos = end + 1;
  }
  // The tail may be the start of a marker whose rest is in the next chunk.
  size_t keep = std::min(kPrefix.size() - 1, data.size() - pos);
  while (keep > 0 && data.compare(data.size() - keep, keep, kPrefix, 0, keep) != 0) --keep;
  out.append(data, pos, data.size() - pos - keep);
  held_ = data.substr(data.size() - keep);
  return out;
}

std::string StartMarkerFilter::flush() { return std::exchange(held_, {}); }

std::vector<int> ranks_not_started(int total, const std::map<int, std::string>& started) {
  std::vector<int> missing;
  for (int r = 0; r < total; ++r) {
    if (!started.contains(r)) missing.push_back(r);
  }
  return missing;
}

std::vector<std::string> hosts_not_started(const std::vector<HostSlots>& hosts,
                                           const std::map<int, std::string>& started) {
  std::vector<std::string> missing;
  int first = 0;
  for (const auto& h : hosts) {
    const int n = static_cast<int>(h.slots.size());
    for (int r = first; r < first + n; ++r) {
      if (!started.contains(r)) {
        missing.push_back(h.host);
        break;
      }
    }
    first += n;
  }
  return missing;
}

}  // namespace zero::launch
