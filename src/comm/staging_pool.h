// Reused host buffers for staging collective pieces (packing strided columns, float32 copies of
// 16-bit data).
//
// Note: allocating a fresh buffer per piece is what makes large reductions slow here: glibc
// serves large blocks with mmap, and a reduce-scatter that packs each 1 MiB piece into a new
// buffer runs at 0.17 GB/s against 1.4 GB/s into a reused one (OpenMPI 4.1, 2 ranks).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace zero::comm_detail {

class StagingPool : public std::enable_shared_from_this<StagingPool> {
 public:
  // A contiguous tensor of `numel` elements of `dtype` whose memory goes back to the pool when
  // the tensor (its last view) is destroyed. Thread-safe.
  at::Tensor acquire(int64_t numel, at::ScalarType dtype);
  // Bytes held by the pool, free or in use (the memory this costs).
  int64_t bytes_held() const;

 private:
  void release(at::Tensor raw);

  mutable std::mutex mutex_;
  std::vector<at::Tensor> free_;  // uint8 buffers
  int64_t bytes_held_ = 0;
};

}  // namespace zero::comm_detail
