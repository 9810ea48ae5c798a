// zero::keep_freed_memory() — makes glibc's malloc keep and reuse the memory of freed tensors.
//
// By default glibc serves each allocation over 128 KiB (adjusting upward as it goes) with a fresh
// mmap and gives it back with munmap on free, and trims the heap top above 128 KiB; a training step
// allocates and frees the same large activations and gradients every step, so every step pays for
// page faults and zeroing of fresh pages again — with two ranks on two cores, the GPT step took
// 140 ms instead of 95 ms (docs/PERFORMANCE.md). Fixing both thresholds high keeps those blocks in
// the heap for the next step, and turning mmap off (M_MMAP_MAX 0) does the same for blocks above
// the threshold's 32 MiB ceiling. Memory freed inside the heap is kept for reuse, not returned;
// by default the heap is never trimmed either (trim_threshold above INT_MAX): at GPT-2 124M, 2
// ranks, stage 0, a 512 MiB trim threshold let each step give the top of the heap back and fault
// it in again — 19 % of the step clearing fresh pages (perf), 2.85 s against stage 2's 2.10 s.
// PyTorch users get the same effect from jemalloc or tcmalloc.
//
// Process-wide, so the library never calls it by itself: zero-train and the benchmarks do, and a
// program embedding zerocpp calls it once at startup (before the model is built). Returns false
// when the C library refuses the settings (not glibc, or a limit), changing nothing then.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zero {

bool keep_freed_memory(std::size_t mmap_threshold = std::size_t{32} << 20, std::size_t trim_threshold = SIZE_MAX);

// The opposite trade for runs whose state is on NVMe, where resident memory is the point: blocks of
// at least `threshold` bytes get pages of their own (glibc's mmap), returned when freed, so they
// never leave holes in the heap that smaller allocations split. Under keep_freed_memory a 300 M
// GPT with everything on NVMe peaked at 1.34 GB resident for 0.5 GB in use. Process-wide, like
// keep_freed_memory, and called after it (zero-train does so when the config offloads to NVMe).
bool return_large_blocks(std::size_t threshold = std::size_t{1} << 20);

// Gives the pages of memory freed so far back to the system (glibc's malloc_trim), once. The
// engine calls it while it is built: the model's own parameter tensors, copied into its flat
// buffers and freed, leave holes between live small objects that no later buffer of that size
// fits, so under keep_freed_memory they would stay resident for the whole run (docs/PERFORMANCE.md, "Peak RSS and system time": 1 GB of
// a 201 M-parameter model's 4.3 GB peak). What the step later allocates there is faulted in again,
// once. Not a setting: the one call above that the library makes. Returns false where the C
// library has no such call.
bool release_freed_memory();

}  // namespace zero
