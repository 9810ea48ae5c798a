// OptimizerSwap — NVMe offload of the optimizer (ZeRO-Infinity): the fp32 master and the optimizer
// states of this rank's partition live in a swap file; each step streams them through a fixed
// pool of buffers one tile (sub_group_size) at a time — read, step, write — so that host memory
// holds `buffers` tiles, not the partition. With pipeline_read the next tiles are read while one
// is stepped; with pipeline_write a tile's write is waited for only when its buffer comes round
// again.
//
// Swap layout: tile after tile; a tile's region holds its master, then each state, then (stages
// 2/3) the tile's gradients, each padded to kIoAlignment. The gradients are written by the
// reducer during backward (gradient_swap.h) and read with the rest of the tile by the step,
// which writes back the master and the states only. The file sits in a folder of its own per process, removed at the end (a
// crashed run's folder is removed by the next run that finds its process gone).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "offload/swap_file.h"
#include "optim/flat_optimizer.h"

namespace zero::engine {

struct SwapOptions {
  std::string dir;  // offload_optimizer.nvme_path
  offload::AioOptions aio;
  int64_t buffer_count = 4;
  bool pipeline_read = false, pipeline_write = false;
  int rank = 0;
};

// One tile in a pool buffer: its master, its optimizer states, and its gradients (undefined when
// the gradients are not in the swap).
struct TileViews {
  at::Tensor master;
  std::vector<at::Tensor> states;
  at::Tensor gradients;
};

class OptimizerSwap {
 public:
  // `num_states`: the optimizer's state tensors besides the master; `with_gradients`: each tile
  // region has a segment for its gradients. Checks the directory, its free space and that the
  // buffers fit in memory, then creates the swap file.
  OptimizerSwap(const SwapOptions& options, std::vector<optim::Tile> tiles, int num_states, bool with_gradients);
  // The destructor removes the file and its folder.

  // The initial contents: the master, which fill(tile, out) writes into `out` (fp32) tile by
  // tile, and zeros for every state.
  void write_initial(const std::function<void(optim::Tile, const at::Tensor&)>& fill);
  // fn(tile, its views) for every tile in order; what fn leaves in the master and the states is
  // written back.
  void for_each_tile(const std::function<void(optim::Tile, const TileViews&)>& fn);

  // State k (0: the master, then the optimizer's) tile by tile: fn(tile, its values) to read
  // them (checkpoint save), or to change them, which are then written back (checkpoint load).
  void read_state(int k, const std::function<void(optim::Tile, const float*)>& fn);
  void update_state(int k, const std::function<void(optim::Tile, float*)>& fn);

  int64_t buffer_bytes() const;  // the pool: what stays resident in host memory
  const std::vector<optim::Tile>& tiles() const { return tiles_; }
  // Where tile i's gradient segment starts in the file (with_gradients).
  int64_t gradient_offset(size_t i) const { return offsets_[i] + (1 + num_states_) * padded(tiles_[i].length); }
  offload::SwapFile& file() { return *file_; }
  int64_t file_bytes() const { return file_ ? file_->size() : 0; }
  int64_t bytes_read() const { return file_->bytes_read(); }
  int64_t bytes_written() const { return file_->bytes_written(); }
  const std::string& warning() const { return file_->warning(); }

 private:
  static int64_t padded(int64_t elements);  // one state of a tile, in bytes, aligned
  static int64_t checked_size(const SwapOptions& options, const std::vector<optim::Tile>& tiles, int segments);
  // A tile's region, and the part of it the step writes back (the gradients are not).
  int64_t region_bytes(size_t i) const { return segments_ * padded(tiles_[i].length); }
  int64_t written_bytes(size_t i) const { return (1 + num_states_) * padded(tiles_[i].length); }
  TileViews views(size_t i, void* buffer) const;
  SwapOptions options_;
  std::vector<optim::Tile> tiles_;
  int num_states_;
  int segments_;  // per tile region: master, states, and the gradients when they are here
  int64_t size_;                  // of the file
  std::vector<int64_t> offsets_;  // of each tile's region in the file
  offload::SwapFolder folder_;                // declared before the file: removed after it
  std::unique_ptr<offload::SwapFile> file_;
  std::vector<offload::AlignedBuffer> buffers_;
};

}  // namespace zero::engine
