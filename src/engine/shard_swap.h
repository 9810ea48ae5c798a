// ShardSwap — stage 3's persistent parameter shards on NVMe (offload_param.device "nvme"): one
// region per unit bucket in a swap file, read into an aligned buffer when a gather needs the
// shard and written back when the step changes it. Host memory holds the shards only while
// they are gathered (at most stage3_max_live_parameters plus one unit).
//
// The aligned buffers, all the size of the largest shard, are reused: a tensor from read() gives
// its buffer back when it goes (at most kSpareBuffers are kept). A fresh buffer per read, freed
// after the gather, left holes that the activations allocated meanwhile split up, so resident
// memory grew by about a unit per unit and step.
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
  // Bucket b's shard as a new tensor of `numel` elements of `dtype` (in a buffer of the pool).
  at::Tensor read(int b, int64_t numel, at::ScalarType dtype);
  // The same, returning as soon as the read is submitted: its contents are valid after wait(ticket).
  at::Tensor read_async(int b, int64_t numel, at::ScalarType dtype, offload::IoTicket& ticket);
  void wait(offload::IoTicket ticket) { file_->wait(ticket); }
  int64_t file_bytes() const { return file_->size(); }
  int64_t spare_bytes() const;  // the pool's buffers not in use
  int64_t bytes_read() const { return file_->bytes_read(); }
  int64_t bytes_written() const { return file_->bytes_written(); }

 private:
  struct Pool;
  at::Tensor buffer(int64_t numel, at::ScalarType dtype);
  std::vector<int64_t> offsets_, bytes_;
  std::shared_ptr<Pool> pool_;  // shared with the tensors that hold its buffers
  std::unique_ptr<offload::SwapFolder> folder_;  // declared before the file: removed after it
  std::unique_ptr<offload::SwapFile> file_;
};

}  // namespace zero::engine
