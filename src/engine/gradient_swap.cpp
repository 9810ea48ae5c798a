#include "engine/gradient_swap.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "engine/optimizer_swap.h"
#include "optim/cpu_kernels.h"
#include "zero/error.h"

namespace zero::engine {
namespace {

// No chunk larger than the largest tile's gradient segment: a chunk never spans two tiles.
int64_t chunk_size(const std::vector<optim::Tile>& tiles, int64_t requested) {
  int64_t largest = 0;
  for (const optim::Tile& t : tiles) largest = std::max(largest, t.length);
  return std::max(offload::kIoAlignment, std::min(offload::io_align_down(requested), offload::io_align_up(4 * largest)));
}

}  // namespace

GradientSwap::GradientSwap(OptimizerSwap& swap, int64_t chunk_bytes)
    : swap_(swap),
      chunk_bytes_(chunk_size(swap.tiles(), chunk_bytes)),
      total_(swap.tiles().empty() ? 0 : swap.tiles().back().offset + swap.tiles().back().length),
      tickets_(2, 0),
      bounce_(chunk_bytes_) {
  chunks_.emplace_back(chunk_bytes_);
  chunks_.emplace_back(chunk_bytes_);
}

size_t GradientSwap::tile_at(int64_t offset) const {
  const auto& tiles = swap_.tiles();
  auto it = std::upper_bound(tiles.begin(), tiles.end(), offset,
                             [](int64_t o, const optim::Tile& t) { return o < t.offset + t.length; });
  return static_cast<size_t>(it - tiles.begin());
}

void GradientSwap::put(int64_t owned_offset, const at::Tensor& shard, bool replace) {
  if (owned_offset != position_) {
    throw Error("internal: gradients reached the NVMe stream out of order (piece at " + std::to_string(owned_offset) +
                ", expected " + std::to_string(position_) + ")");
  }
  if (position_ == 0) sum_ = 0;
  const int64_t n = shard.numel();
  // The accumulated piece in fp32, as the in-memory accumulator would hold it.
  at::Tensor piece;
  if (replace) {
    piece = shard.scalar_type() == at::kFloat ? shard.contiguous() : shard.to(at::kFloat);
  } else {
    piece = at::empty({n}, at::kFloat);
    read(owned_offset, n, piece.data_ptr<float>());
    piece.add_(shard);
  }
  sum_ += optim::sum_of_squares(piece.data_ptr<float>(), n);
  append(piece.data_ptr<float>(), n);
  if (position_ == total_) {  // the stream is complete: on disk before anyone reads it
    swap_.file().wait_all();
    std::fill(tickets_.begin(), tickets_.end(), 0);
    position_ = 0;
    last_sum_ = sum_;
  }
}

void GradientSwap::append(const float* values, int64_t n) {
  const auto& tiles = swap_.tiles();
  while (n > 0) {
    const size_t i = tile_at(position_);
    const optim::Tile& t = tiles[i];
    if (chunk_offset_ < 0) {
      // Chunks start at a tile's start or right after a full chunk: aligned in the file.
      chunk_offset_ = swap_.gradient_offset(i) + 4 * (position_ - t.offset);
      if (chunk_offset_ % offload::kIoAlignment != 0) throw Error("internal: unaligned gradient chunk");
    }
    const int64_t take = std::min({n, t.offset + t.length - position_, (chunk_bytes_ - chunk_fill_) / 4});
    std::memcpy(static_cast<char*>(chunks_[chunk_].data()) + chunk_fill_, values, static_cast<size_t>(4 * take));
    chunk_fill_ += 4 * take;
    position_ += take;
    values += take;
    n -= take;
    if (chunk_fill_ == chunk_bytes_ || position_ == t.offset + t.length) flush_chunk();
  }
}

void GradientSwap::flush_chunk() {
  char* data = static_cast<char*>(chunks_[chunk_].data());
  const int64_t bytes = offload::io_align_up(chunk_fill_);  // the tail of a tile's segment is padding
  std::memset(data + chunk_fill_, 0, static_cast<size_t>(bytes - chunk_fill_));
  tickets_[chunk_] = swap_.file().write(chunk_offset_, data, bytes);
  chunk_ = (chunk_ + 1) % chunks_.size();
  if (tickets_[chunk_] != 0) swap_.file().wait(tickets_[chunk_]);  // its previous write is done
  tickets_[chunk_] = 0;
  chunk_offset_ = -1;
  chunk_fill_ = 0;
}

void GradientSwap::read(int64_t offset, int64_t n, float* out) {
  // Nothing written this micro-step reaches [offset, ...): the chunk being filled is not on disk
  // yet, and the chunks in flight lie before it.
  const auto& tiles = swap_.tiles();
  while (n > 0) {
    const size_t i = tile_at(offset);
    const optim::Tile& t = tiles[i];
    const int64_t begin = swap_.gradient_offset(i) + 4 * (offset - t.offset);
    const int64_t start = offload::io_align_down(begin), skip = begin - start;
    const int64_t take = std::min({n, t.offset + t.length - offset, (chunk_bytes_ - skip) / 4});
    swap_.file().wait(swap_.file().read(start, bounce_.data(), offload::io_align_up(skip + 4 * take)));
    std::memcpy(out, static_cast<const char*>(bounce_.data()) + skip, static_cast<size_t>(4 * take));
    offset += take;
    out += take;
    n -= take;
  }
}

double GradientSwap::sum_of_squares() const {
  if (position_ != 0) throw Error("internal: the optimizer step began before the gradients reached NVMe");
  return last_sum_;
}

int64_t GradientSwap::buffer_bytes() const {
  return static_cast<int64_t>(chunks_.size()) * chunk_bytes_ + bounce_.bytes();
}

}  // namespace zero::engine
