#include "comm/comms_logger.h"

#include <fmt/core.h>

#include <cmath>

namespace zero {
namespace {

constexpr CollectiveOp kOps[] = {CollectiveOp::kAllReduce, CollectiveOp::kReduceScatter, CollectiveOp::kAllGather,
                                 CollectiveOp::kBroadcast, CollectiveOp::kAllToAll,      CollectiveOp::kBarrier};

// DeepSpeed's op names for what zerocpp calls by the shorter name.
bool names_op(const std::string& name, CollectiveOp op) {
  if (name == to_string(op)) return true;
  switch (op) {
    case CollectiveOp::kAllReduce:
      return name == "all_reduce_coalesced" || name == "inference_all_reduce";
    case CollectiveOp::kReduceScatter:
      return name == "reduce_scatter_tensor" || name == "reduce_scatter_base";
    case CollectiveOp::kAllGather:
      return name == "all_gather_into_tensor" || name == "all_gather_base";
    case CollectiveOp::kAllToAll:
      return name == "all_to_all_single";
    default:
      return false;
  }
}

double gbps(double bytes, double seconds) { return seconds > 0 ? bytes * 8 / seconds / 1e9 : 0.0; }

}  // namespace

std::string human_bytes(double bytes) {
  static const char* kUnits[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  if (bytes <= 0) return "0B";
  int i = std::min(5, static_cast<int>(std::floor(std::log(bytes) / std::log(1024.0))));
  return fmt::format("{:.2f} {}", bytes / std::pow(1024.0, i), kUnits[i]);
}

CommsLogger::CommsLogger(const CommsLoggerConfig& config, int world_size, std::string scope, std::FILE* verbose_out,
                         std::string group)
    : verbose_(config.verbose), debug_(config.debug), world_size_(world_size), scope_(std::move(scope)),
      group_(std::move(group)), verbose_out_(verbose_out) {
  for (size_t i = 0; i < std::size(kOps); ++i) {
    profiled_[i] = config.prof_all;
    for (const auto& name : config.prof_ops) profiled_[i] = profiled_[i] || names_op(name, kOps[i]);
  }
}

bool CommsLogger::profiles(CollectiveOp op) const { return profiled_[static_cast<int>(op)]; }

void CommsLogger::record(const CollectiveRecord& r, const char* phase) {
  if (!profiles(r.op)) return;
  const std::string key_phase = debug_ && phase ? phase : "";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    CommsRow& row = rows_[{r.op, key_phase, r.message_bytes}];
    row.op = r.op;
    row.phase = key_phase;
    row.message_bytes = r.message_bytes;
    row.count += 1;
    row.bus_bytes += r.bus_bytes;
    row.seconds += r.seconds;
  }
  if (verbose_ && verbose_out_) {
    fmt::print(verbose_out_, "comm op: {}{} | {} | time (ms): {:.2f} | msg size: {} | algbw (Gbps): {:.2f} | busbw (Gbps): {:.2f}\n",
               to_string(r.op), key_phase.empty() ? "" : " | " + key_phase, group_.empty() ? scope_ : group_ + " " + scope_,
               r.seconds * 1e3,
               human_bytes(static_cast<double>(r.message_bytes)), gbps(static_cast<double>(r.message_bytes), r.seconds),
               gbps(r.bus_bytes, r.seconds));
  }
}

std::vector<CommsRow> CommsLogger::rows() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CommsRow> out;
  for (const auto& [key, row] : rows_) out.push_back(row);
  return out;
}

double CommsLogger::bus_bytes() const {
  double sum = 0;
  for (const auto& row : rows()) sum += row.bus_bytes;
  return sum;
}

std::string CommsLogger::summary(int64_t steps) const {
  std::string out = group_.empty() ? std::string() : fmt::format("{} group:\n", group_);
  out += fmt::format("Comm. Op{:<14}{:<12}Message Size{:<4}{:>8}{:>18}{:>18}{:>16}{:>14}{:>14}\n", "", "Scope",
                                "", "Count", "Sent/rank", "Total Lat.(ms)", "Avg Lat.(ms)", "algbw(Gbps)", "busbw(Gbps)");
  CollectiveOp previous = CollectiveOp::kBarrier;
  bool first = true;
  for (const auto& row : rows()) {
    if (first || row.op != previous) {
      out += fmt::format("{}\n", to_string(row.op));
      previous = row.op;
      first = false;
    }
    const double message = static_cast<double>(row.message_bytes) * static_cast<double>(row.count);
    out += fmt::format("  {:<20}{:<12}{:<16}{:>8}{:>18}{:>18.2f}{:>16.3f}{:>14.2f}{:>14.2f}\n", row.phase,
                       scope_, human_bytes(static_cast<double>(row.message_bytes)), row.count,
                       human_bytes(row.bus_bytes), row.seconds * 1e3, row.seconds * 1e3 / static_cast<double>(row.count),
                       gbps(message, row.seconds), gbps(row.bus_bytes, row.seconds));
  }
  const double sent = bus_bytes();
  out += fmt::format("sent by this rank in these collectives: {:.0f} bytes ({}) over {} ranks{}", sent, human_bytes(sent),
                     world_size_, group_.empty() ? "" : " of its " + group_ + " group");
  if (steps > 0) out += fmt::format(", {:.0f} bytes per step over {} steps", sent / static_cast<double>(steps), steps);
  return out + "\n";
}

}  // namespace zero
