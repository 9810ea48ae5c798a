#include "engine/shard_swap.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>

#include "zero/error.h"

namespace zero::engine {
namespace {

int64_t aligned(int64_t bytes) { return (bytes + offload::kIoAlignment - 1) / offload::kIoAlignment * offload::kIoAlignment; }

// Aligned memory owned by the tensor that views it.
at::Tensor aligned_tensor(int64_t numel, at::ScalarType dtype) {
  void* data = nullptr;
  const int64_t bytes = aligned(numel * static_cast<int64_t>(c10::elementSize(dtype)));
  if (posix_memalign(&data, offload::kIoAlignment, static_cast<size_t>(std::max<int64_t>(bytes, offload::kIoAlignment))) != 0)
    throw Error("cannot allocate an aligned buffer for a parameter shard");
  return at::from_blob(data, {numel}, [](void* p) { std::free(p); }, at::TensorOptions().dtype(dtype));
}

}  // namespace

ShardSwap::ShardSwap(const SwapOptions& options, const std::vector<int64_t>& shard_bytes) {
  int64_t size = 0;
  for (int64_t b : shard_bytes) {
    offsets_.push_back(size);
    bytes_.push_back(aligned(b));
    size += aligned(b);
  }
  offload::check_swap_dir(options.dir, size, "zero_optimization.offload_param.nvme_path");
  folder_ = std::make_unique<offload::SwapFolder>(options.dir, options.rank);
  file_ = std::make_unique<offload::SwapFile>(folder_->path() + "/parameters.swap",
                                              std::max<int64_t>(size, offload::kIoAlignment), options.aio);
}

void ShardSwap::write(int b, const at::Tensor& values, at::ScalarType dtype) {
  at::Tensor staging = aligned_tensor(values.numel(), dtype);
  staging.copy_(values.reshape(-1));
  file_->wait(file_->write(offsets_[static_cast<size_t>(b)], staging.data_ptr(), bytes_[static_cast<size_t>(b)]));
}

at::Tensor ShardSwap::read(int b, int64_t numel, at::ScalarType dtype) {
  at::Tensor out = aligned_tensor(numel, dtype);
  file_->wait(file_->read(offsets_[static_cast<size_t>(b)], out.data_ptr(), bytes_[static_cast<size_t>(b)]));
  return out;
}

}  // namespace zero::engine
