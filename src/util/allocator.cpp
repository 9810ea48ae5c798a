#include "zero/allocator.h"

#if defined(__GLIBC__)
#include <malloc.h>

#include <climits>
#endif

namespace zero {

bool keep_freed_memory(std::size_t mmap_threshold, std::size_t trim_threshold) {
#if defined(__GLIBC__)
  // Both must be set: fixing one turns off glibc's dynamic adjustment of the other, and either
  // left at 128 KiB is slower than the default (measured: 270 and 700 ms against 140 ms).
  // M_MMAP_MAX 0: blocks above the mmap threshold's 32 MiB ceiling (a 200 M-parameter model's
  // stage-3 units, its gradient buckets) come from the heap too and are reused, instead of being
  // mapped and faulted in anew each time (docs/PERFORMANCE.md, "A 201 M-parameter GPT": stage 3 at 201 M, 3.96 → 3.36 s per step,
  // system time 12.6 → 6.8 s of a 5-step run).
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(mmap_threshold)) == 1 &&
         // -1: never trim (glibc's documented value for that)
         mallopt(M_TRIM_THRESHOLD, trim_threshold > INT_MAX ? -1 : static_cast<int>(trim_threshold)) == 1 &&
         mallopt(M_MMAP_MAX, 0) == 1;
#else
  (void)mmap_threshold;
  (void)trim_threshold;
  return false;
#endif
}

bool return_large_blocks(std::size_t threshold) {
#if defined(__GLIBC__)
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(threshold)) == 1 && mallopt(M_MMAP_MAX, 1 << 20) == 1;
#else
  (void)threshold;
  return false;
#endif
}

bool release_freed_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
  return true;
#else
  return false;
#endif
}

}  // namespace zero
