#include "comm/staging_pool.h"

#include <ATen/ATen.h>

#include "util/debug_buffers.h"

namespace zero::comm_detail {

at::Tensor StagingPool::acquire(int64_t numel, at::ScalarType dtype) {
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t bytes = std::max<int64_t>(numel * element, 8);
  at::Tensor raw;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The smallest free buffer that fits: pieces of one size reuse each other's buffers.
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->numel() >= bytes && (best == free_.end() || it->numel() < best->numel())) best = it;
    }
    if (best != free_.end()) {
      raw = *best;
      free_.erase(best);
    }
  }
  if (!raw.defined()) {
    const int64_t rounded = (bytes + 63) / 64 * 64;  // any dtype views it
    raw = at::empty({rounded}, at::kByte);
    std::lock_guard<std::mutex> lock(mutex_);
    bytes_held_ += rounded;
  }
  std::weak_ptr<StagingPool> pool = weak_from_this();
  return at::from_blob(
      raw.data_ptr(), {numel},
      [pool, raw](void*) {
        if (auto p = pool.lock()) p->release(raw);
      },
      at::TensorOptions().dtype(dtype));
}

void StagingPool::release(at::Tensor raw) {
  poison_if_debugging(raw);
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(std::move(raw));
}

int64_t StagingPool::bytes_held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_held_;
}

}  // namespace zero::comm_detail
