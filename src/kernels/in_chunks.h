// fn(offset, length) over [0, n) in chunks of `chunk` elements shared among LibTorch's intra-op
// threads (one per rank in the engine's setting). For elementwise kernels whose results do not
// depend on where a chunk starts (every element through the same vector code, tails included):
// then threads never change a bit.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

namespace zero::kernels {

template <class Fn>
void in_chunks(int64_t n, int64_t chunk, Fn&& fn) {
  if (n <= chunk || at::get_num_threads() == 1) return fn(int64_t{0}, n);
  at::parallel_for(0, (n + chunk - 1) / chunk, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) fn(c * chunk, std::min(chunk, n - c * chunk));
  });
}

}  // namespace zero::kernels
