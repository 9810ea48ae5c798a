#include "engine/optimizer_swap.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "zero/error.h"

namespace zero::engine {
namespace {

// MemAvailable from /proc/meminfo, in bytes; 0 when unknown.
int64_t available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace

// The swap's size and its buffers' need, before anything is created.
int64_t OptimizerSwap::checked_size(const SwapOptions& options, const std::vector<optim::Tile>& tiles,
                                    int segments) {
  int64_t size = 0, largest = 0;
  for (const optim::Tile& t : tiles) {
    const int64_t region = segments * padded(t.length);
    size += region;
    largest = std::max(largest, region);
  }
  // The pool must fit (checked first: it needs no I/O): a buffer holds one sub_group_size tile.
  const int64_t count = std::clamp<int64_t>(options.buffer_count, 1, static_cast<int64_t>(tiles.size()));
  const int64_t available = available_memory();
  if (available > 0 && count * largest > available) {
    throw Error("zero_optimization.offload_optimizer: " + std::to_string(count) + " buffers of " +
                    std::to_string(largest) +
                    " bytes (buffer_count × one sub_group_size tile of master, optimizer states and gradients) need more than the " +
                    std::to_string(available) + " bytes of memory available; lower zero_optimization.sub_group_size or offload_optimizer.buffer_count",
                "zero_optimization.sub_group_size");
  }
  offload::check_swap_dir(options.dir, size, "zero_optimization.offload_optimizer.nvme_path");
  return size;
}

OptimizerSwap::OptimizerSwap(const SwapOptions& options, std::vector<optim::Tile> tiles, int num_states,
                             bool with_gradients)
    : options_(options),
      tiles_(std::move(tiles)),
      num_states_(num_states),
      segments_(1 + num_states + (with_gradients ? 1 : 0)),
      size_(checked_size(options_, tiles_, segments_)),
      folder_(options_.dir, options_.rank),
      file_(std::make_unique<offload::SwapFile>(folder_.path() + "/optimizer.swap",
                                                std::max<int64_t>(size_, offload::kIoAlignment), options_.aio)) {
  int64_t largest = 0;
  for (size_t i = 0; i < tiles_.size(); ++i) {
    offsets_.push_back(i == 0 ? 0 : offsets_.back() + region_bytes(i - 1));
    largest = std::max(largest, region_bytes(i));
  }
  const int64_t count = std::clamp<int64_t>(options_.buffer_count, 1, static_cast<int64_t>(tiles_.size()));
  for (int64_t i = 0; i < count; ++i) buffers_.emplace_back(largest);
}

int64_t OptimizerSwap::padded(int64_t elements) {
  return offload::io_align_up(elements * 4);
}

TileViews OptimizerSwap::views(size_t i, void* buffer) const {
  auto segment = [&](int k) {
    return at::from_blob(static_cast<char*>(buffer) + k * padded(tiles_[i].length), {tiles_[i].length},
                         at::TensorOptions().dtype(at::kFloat));
  };
  TileViews out;
  out.master = segment(0);
  for (int k = 1; k <= num_states_; ++k) out.states.push_back(segment(k));
  if (segments_ > 1 + num_states_) out.gradients = segment(1 + num_states_);
  return out;
}

void OptimizerSwap::write_initial(const std::function<void(optim::Tile, const at::Tensor&)>& fill) {
  for (size_t i = 0; i < tiles_.size(); ++i) {
    void* buffer = buffers_[0].data();
    const TileViews v = views(i, buffer);
    fill(tiles_[i], v.master);
    for (const at::Tensor& state : v.states) state.zero_();
    file_->wait(file_->write(offsets_[i], buffer, written_bytes(i)));
  }
}

void OptimizerSwap::for_each_tile(const std::function<void(optim::Tile, const TileViews&)>& fn) {
  const size_t n = tiles_.size(), count = buffers_.size();
  std::vector<offload::IoTicket> read(n, 0), written(count, 0);  // written: per buffer, its last write
  auto start_read = [&](size_t i) {
    const size_t b = i % count;
    if (written[b] != 0) file_->wait(written[b]);  // the buffer's previous tile is on disk first
    read[i] = file_->read(offsets_[i], buffers_[b].data(), region_bytes(i));
  };
  size_t next_read = 0;
  for (size_t i = 0; i < n; ++i) {
    // Read ahead as far as the free buffers allow (pipeline_read), else just this tile.
    const size_t limit = options_.pipeline_read ? std::min(n, i + count) : i + 1;
    while (next_read < limit) start_read(next_read++);
    file_->wait(read[i]);
    const size_t b = i % count;
    fn(tiles_[i], views(i, buffers_[b].data()));
    written[b] = file_->write(offsets_[i], buffers_[b].data(), written_bytes(i));
    if (!options_.pipeline_write) file_->wait(written[b]);
  }
  file_->wait_all();
}

void OptimizerSwap::read_state(int k, const std::function<void(optim::Tile, const float*)>& fn) {
  for (size_t i = 0; i < tiles_.size(); ++i) {
    const int64_t bytes = padded(tiles_[i].length);
    file_->wait(file_->read(offsets_[i] + k * bytes, buffers_[0].data(), bytes));
    fn(tiles_[i], static_cast<const float*>(buffers_[0].data()));
  }
}

void OptimizerSwap::update_state(int k, const std::function<void(optim::Tile, float*)>& fn) {
  for (size_t i = 0; i < tiles_.size(); ++i) {
    const int64_t bytes = padded(tiles_[i].length);
    file_->wait(file_->read(offsets_[i] + k * bytes, buffers_[0].data(), bytes));
    fn(tiles_[i], static_cast<float*>(buffers_[0].data()));
    file_->wait(file_->write(offsets_[i] + k * bytes, buffers_[0].data(), bytes));
  }
}

int64_t OptimizerSwap::buffer_bytes() const {
  int64_t total = 0;
  for (const auto& b : buffers_) total += offload::io_align_up(b.bytes());
  return total;
}

}  // namespace zero::engine
