// CommsLogger — DeepSpeed's comms_logger: for every profiled collective, the count, bytes, latency,
// algorithm bandwidth and bus bandwidth per op and message size; a line per call when verbose; a
// summary table on request (the engine prints it when it is destroyed). Torch-free.
//
// Bandwidths follow nccl-tests (and CommStats): algbw = message bytes / time, busbw = what each
// rank sends / time (all-reduce 2(n-1)/n of the message, reduce-scatter, all-gather and
// all-to-all (n-1)/n, broadcast 1), both in Gbps (1e9 bits per second) as DeepSpeed prints them.
// Every row carries the scope of the communicator: "intra-node" when all its ranks share a host,
// "inter-node" when it spans several.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "zero/comm_stats.h"
#include "zero/config.h"

namespace zero {

struct CommsRow {
  CollectiveOp op;
  std::string phase;  // with "debug": the engine phase in which its completion was seen (forward, ...)
  int64_t message_bytes = 0;
  int64_t count = 0;
  double bus_bytes = 0;  // summed: bytes each rank sent
  double seconds = 0;    // summed latency
};

class CommsLogger {
 public:
  // `group`: the communicator's name in the lines and the summary ("tensor-parallel"; "": none).
  CommsLogger(const CommsLoggerConfig& config, int world_size, std::string scope, std::FILE* verbose_out,
              std::string group = "");

  // Whether `op` is profiled: prof_all, or named in prof_ops (DeepSpeed's names are accepted too:
  // all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single, all_reduce_coalesced).
  bool profiles(CollectiveOp op) const;
  // One completed collective (CommStats' listener); `phase`: the engine phase seeing it complete.
  void record(const CollectiveRecord& r, const char* phase);

  std::vector<CommsRow> rows() const;
  // Bytes this rank sent in profiled collectives so far (the comm volume).
  double bus_bytes() const;
  // The summary table; `steps` > 0 adds the bytes sent per step.
  std::string summary(int64_t steps) const;

 private:
  bool profiled_[6] = {};
  bool verbose_, debug_;
  int world_size_;
  std::string scope_, group_;
  std::FILE* verbose_out_;
  mutable std::mutex mutex_;
  std::map<std::tuple<CollectiveOp, std::string, int64_t>, CommsRow> rows_;
};

// DeepSpeed's convert_size: "4.0 MB" with 1024-based units.
std::string human_bytes(double bytes);

}  // namespace zero
