// GradientSwap — stages 2/3 with the optimizer on NVMe: the reduced gradients of the owned
// shards go to the optimizer's swap file, into each tile's gradient segment (optimizer_swap.h),
// instead of an fp32 accumulator the size of the partition, so that host memory does not grow
// with the model. The step then reads each tile's gradients with its master and moments.
//
// Buckets land their reductions in order (bucket.h) and a rank's owned buffer is bucket after
// bucket, so the pieces arrive as one sequential stream per micro-step: copied into a small ring of
// aligned chunks, each written (O_DIRECT, asynchronously) when full or at a tile's end. A later
// micro-step of the same accumulation reads the stored values of its piece first and adds: what
// the file holds at and after the stream's position is always the previous micro-step's, because
// the chunk being filled has not been written yet.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "offload/swap_file.h"

namespace zero::engine {

class OptimizerSwap;

class GradientSwap {
 public:
  // `chunk_bytes`: the size of one write (rounded down to kIoAlignment, and at most one tile's
  // gradients); two chunks and a bounce buffer for the reads of accumulation stay in memory.
  GradientSwap(OptimizerSwap& swap, int64_t chunk_bytes);

  // The reduced shard of the bucket at `owned_offset` (each piece starts where the previous one
  // ended; the stream starts over at 0). `replace`: the first reduction since zero(); else the
  // piece is added to what the file holds, in fp32, as the in-memory accumulator adds.
  void put(int64_t owned_offset, const at::Tensor& shard, bool replace);

  // Of the last complete stream: the sum of squares of the accumulated gradients, bucket piece by
  // bucket piece in owned order (the grouping Partition::sum_of_squares uses in memory, so the
  // two agree to the bit).
  double sum_of_squares() const;
  bool complete() const { return position_ == 0; }
  int64_t buffer_bytes() const;

 private:
  void append(const float* values, int64_t n);
  void flush_chunk();
  void read(int64_t offset, int64_t n, float* out);  // what the file holds for [offset, offset + n)
  size_t tile_at(int64_t offset) const;               // the tile holding owned element `offset`
  OptimizerSwap& swap_;
  int64_t chunk_bytes_, total_;
  int64_t position_ = 0;      // owned elements streamed this micro-step
  double sum_ = 0, last_sum_ = 0;
  std::vector<offload::AlignedBuffer> chunks_;
  std::vector<offload::IoTicket> tickets_;  // per chunk, its last write (0: none)
  size_t chunk_ = 0;            // the one being filled
  int64_t chunk_offset_ = -1;   // its place in the file (-1: empty)
  int64_t chunk_fill_ = 0;      // its bytes
  offload::AlignedBuffer bounce_;
};

}  // namespace zero::engine
