// GatherOrder — stage 3's cross-rank check that every rank gathered the same units in the same
// order since the last check: same-sized units gathered in different orders would silently mix
// their shards, so a difference is an error naming the first gather that differs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "zero/communicator.h"

namespace zero::engine {

class GatherOrder {
 public:
  void record(int bucket) {
    sequence_.push_back(bucket);
    hash_ = (hash_ ^ static_cast<uint64_t>(bucket + 1)) * kFnvPrime;
  }
  // Collective: one 16-byte all-reduce when the orders agree; the sequences are exchanged to name
  // the first difference when they do not. `describe(bucket)` names a bucket in the error.
  // Starts a new sequence either way.
  void verify(Communicator& comm, const std::function<std::string(int64_t bucket)>& describe);

 private:
  static constexpr uint64_t kFnvOffset = 14695981039346656037ull, kFnvPrime = 1099511628211ull;  // FNV-1a
  std::vector<int64_t> sequence_;  // buckets gathered since the last verify
  uint64_t hash_ = kFnvOffset;
};

}  // namespace zero::engine
