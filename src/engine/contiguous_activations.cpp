// The buffer of activation_checkpointing.contiguous_memory_optimization (contiguous_activations.h).
#include "engine/contiguous_activations.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>

namespace zero::checkpointing {
namespace {

constexpr int64_t kAlignment = 64;  // a slot starts on a cache line (and any dtype's boundary)

std::atomic<bool> enabled{false};

}  // namespace

std::pair<at::Tensor, std::shared_ptr<void>> ContiguousActivations::keep(const at::Tensor& t) {
  const at::Tensor source = t.contiguous();
  const auto bytes = static_cast<int64_t>(source.nbytes());
  std::lock_guard<std::mutex> lock(mutex_);
  // (A buffer on another device than the input's is outgrown too: the slot is where the input was.)
  if (free_.empty() || bytes > slot_bytes_ || buffer_.device() != source.device()) {
    const int64_t slot_bytes = std::max(slot_bytes_, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    allocate(std::max<int64_t>(4, 2 * slots_), slot_bytes, source.device());
    grew_ = true;
  }
  const int64_t slot = free_.back();
  free_.pop_back();
  peak_held_ = std::max(peak_held_, ++held_);
  at::Tensor copy = buffer_.narrow(0, slot * slot_bytes_, bytes).view(source.scalar_type()).view(source.sizes());
  copy.copy_(source);
  const int64_t generation = generation_;
  // (The handle points at the buffer's owner: never null, so a held slot tests true.)
  return {copy, std::shared_ptr<void>(this, [generation, slot](void* owner) {
            static_cast<ContiguousActivations*>(owner)->let_go(generation, slot);
          })};
}

void ContiguousActivations::let_go(int64_t generation, int64_t slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (generation <= reset_generation_) return;  // held before a reset: counted no more
  if (generation != generation_) {
    --held_;  // a slot of a buffer outgrown: the buffer goes once its views do
  } else {
    free_.push_back(slot);
    --held_;
  }
  // Every slot let go after growing: the buffer again, exactly as large as this run needed.
  if (held_ == 0 && grew_ && peak_held_ > 0) {
    allocate(peak_held_, slot_bytes_, buffer_.device());
    grew_ = false;
  }
}

void ContiguousActivations::allocate(int64_t slots, int64_t slot_bytes, at::Device device) {
  buffer_ = at::empty({slots * slot_bytes}, at::TensorOptions().dtype(at::kByte).device(device));
  slots_ = slots;
  slot_bytes_ = slot_bytes;
  ++generation_;
  ++allocations_;
  free_.clear();
  for (int64_t s = slots - 1; s >= 0; --s) free_.push_back(s);  // slot 0 first: the buffer fills from its start
}

ContiguousBufferStats ContiguousActivations::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {.bytes = slots_ * slot_bytes_, .slots = slots_, .slot_bytes = slot_bytes_, .held = held_,
          .peak_held = peak_held_, .allocations = allocations_};
}

void ContiguousActivations::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  buffer_ = at::Tensor();
  slots_ = slot_bytes_ = 0;
  reset_generation_ = ++generation_;
  free_.clear();
  held_ = peak_held_ = allocations_ = 0;
  grew_ = false;
}

ContiguousActivations& contiguous_activations() {
  static ContiguousActivations buffer;
  return buffer;
}

bool contiguous_enabled() { return enabled; }

void set_contiguous(bool on) {
  enabled = on;
  contiguous_activations().reset();
}

ContiguousBufferStats contiguous_buffer_stats() { return contiguous_activations().stats(); }

}  // namespace zero::checkpointing
