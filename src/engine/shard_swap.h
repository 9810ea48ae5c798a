// ShardSwap — stage 3's persistent parameter shards on NVMe (offload_param.device "nvme"): one
// region per unit bucket in a swap file, read into a fresh aligned buffer when a gather needs the
// shard and written back when the step changes it. Host memory holds the shards only while
// they are gathered (at most stage3_max_live_parameters plus one unit).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/optimizer_swap.h"
#include "offload/swap_file.h"

namespace zero::engine {

class ShardSwap {
 public:
  // `shard_bytes[b]`: bucket b's shard in bytes (0: not swapped, e.g. the root).
  ShardSwap(const SwapOptions& options, const std::vector<int64_t>& shard_bytes);
  // The destructor removes the file and its folder.

  // The whole shard (`values`, converted to `dtype`, the model's), waited for.
  void write(int b, const at::Tensor& values, at::ScalarType dtype);
  // Bucket b's shard as a new tensor of `numel` elements of `dtype` (its own aligned memory).
  at::Tensor read(int b, int64_t numel, at::ScalarType dtype);
  int64_t file_bytes() const { return file_->size(); }

 private:
  std::vector<int64_t> offsets_, bytes_;
  std::unique_ptr<offload::SwapFolder> folder_;  // declared before the file: removed after it
  std::unique_ptr<offload::SwapFile> file_;
};

}  // namespace zero::engine
