#include "engine/shard_swap.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "zero/error.h"

namespace zero::engine {
namespace {

constexpr size_t kSpareBuffers = 2;

}  // namespace

struct ShardSwap::Pool {
  int64_t buffer_bytes = offload::kIoAlignment;
  std::mutex mutex;  // a tensor may go on any thread
  std::vector<void*> spare;
  ~Pool() {
    for (void* p : spare) offload::unmap_pages(p, buffer_bytes);
  }
  void give_back(void* p) {
    std::lock_guard<std::mutex> lock(mutex);
    if (spare.size() < kSpareBuffers) {
      spare.push_back(p);
    } else {
      offload::unmap_pages(p, buffer_bytes);
    }
  }
};

ShardSwap::ShardSwap(const SwapOptions& options, const std::vector<int64_t>& shard_bytes)
    : pool_(std::make_shared<Pool>()) {
  int64_t size = 0;
  for (int64_t b : shard_bytes) {
    offsets_.push_back(size);
    bytes_.push_back(offload::io_align_up(b));
    size += offload::io_align_up(b);
    pool_->buffer_bytes = std::max(pool_->buffer_bytes, offload::io_align_up(b));
  }
  offload::check_swap_dir(options.dir, size, "zero_optimization.offload_param.nvme_path");
  folder_ = std::make_unique<offload::SwapFolder>(options.dir, options.rank);
  file_ = std::make_unique<offload::SwapFile>(folder_->path() + "/parameters.swap",
                                              std::max<int64_t>(size, offload::kIoAlignment), options.aio);
}

at::Tensor ShardSwap::buffer(int64_t numel, at::ScalarType dtype) {
  void* data = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool_->mutex);
    if (!pool_->spare.empty()) {
      data = pool_->spare.back();
      pool_->spare.pop_back();
    }
  }
  if (data == nullptr) data = offload::map_pages(pool_->buffer_bytes);
  return at::from_blob(
      data, {numel}, [pool = pool_](void* p) { pool->give_back(p); }, at::TensorOptions().dtype(dtype));
}

void ShardSwap::write(int b, const at::Tensor& values, at::ScalarType dtype) {
  at::Tensor staging = buffer(values.numel(), dtype);
  staging.copy_(values.reshape(-1));
  file_->wait(file_->write(offsets_[static_cast<size_t>(b)], staging.data_ptr(), bytes_[static_cast<size_t>(b)]));
}

at::Tensor ShardSwap::read_async(int b, int64_t numel, at::ScalarType dtype, offload::IoTicket& ticket) {
  at::Tensor out = buffer(numel, dtype);
  ticket = file_->read(offsets_[static_cast<size_t>(b)], out.data_ptr(), bytes_[static_cast<size_t>(b)]);
  return out;
}

at::Tensor ShardSwap::read(int b, int64_t numel, at::ScalarType dtype) {
  offload::IoTicket ticket = 0;
  at::Tensor out = read_async(b, numel, dtype, ticket);
  file_->wait(ticket);
  return out;
}

int64_t ShardSwap::spare_bytes() const {
  std::lock_guard<std::mutex> lock(pool_->mutex);
  return static_cast<int64_t>(pool_->spare.size()) * pool_->buffer_bytes;
}

}  // namespace zero::engine
