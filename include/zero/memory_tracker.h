// zero::MemoryTracker — counts the bytes of every CPU tensor allocated after it is installed (it
// wraps LibTorch's CPU allocator), keeps the peak, and can enforce a per-process budget: an
// allocation that would exceed it throws zero::Error instead. Tests use it to give each rank an
// honest memory limit on a machine that has more; operators can use it to watch tensor memory.
#pragma once

#include <cstdint>

namespace zero {

class MemoryTracker {
 public:
  // Installs the tracker as the CPU allocator (once per process; later calls return it).
  static MemoryTracker& install();

  int64_t current() const;  // bytes of live tensors allocated through the tracker
  int64_t peak() const;     // the most `current` has been since install or reset_peak()
  // The largest single allocation since install or reset_peak() (bytes): what one tensor took.
  int64_t largest_allocation() const;
  void reset_peak();  // and the largest allocation
  // 0: no limit. Bytes allocated before installing are not counted.
  void set_budget(int64_t bytes);
  int64_t budget() const;

 private:
  MemoryTracker() = default;
};

}  // namespace zero
