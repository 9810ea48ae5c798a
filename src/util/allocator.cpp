#include "zero/allocator.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace zero {

bool keep_freed_memory(std::size_t mmap_threshold, std::size_t trim_threshold) {
#if defined(__GLIBC__)
  // Both must be set: fixing one turns off glibc's dynamic adjustment of the other, and either
  // left at 128 KiB is slower than the default (measured: 270 and 700 ms against 140 ms).
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(mmap_threshold)) == 1 &&
         mallopt(M_TRIM_THRESHOLD, static_cast<int>(trim_threshold)) == 1;
#else
  (void)mmap_threshold;
  (void)trim_threshold;
  return false;
#endif
}

}  // namespace zero
