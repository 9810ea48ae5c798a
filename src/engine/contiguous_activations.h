// activation_checkpointing.contiguous_memory_optimization (include/zero/activation_checkpoint.h):
// the inputs that checkpoints keep, copied into equal slots of one preallocated buffer instead of
// each in a tensor of its own — DeepSpeed packs its partitioned checkpoints likewise, so that the
// long-lived ones do not fragment the memory the short-lived activations come and go in.
//
// A slot is held from a checkpoint's forward until its backward has run (the node lets it go),
// so with pipeline stages several micro-batches' slots are held at once. The buffer sizes itself:
// when no slot is free, or the slots are too small, it allocates a larger one (the slots held in
// the old one stay there until let go); once every slot is let go after such growth it is
// allocated again at exactly the most slots held at once, and from then on — every later step
// being alike — it allocates nothing.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "zero/activation_checkpoint.h"

namespace zero::checkpointing {

class ContiguousActivations {
 public:
  // A copy of `t` in a free slot (a view of the buffer, shaped and typed as `t`), and the handle
  // whose destruction frees the slot.
  std::pair<at::Tensor, std::shared_ptr<void>> keep(const at::Tensor& t);
  ContiguousBufferStats stats() const;
  void reset();  // no buffer, counts from zero (slots still held stay valid and are not counted)

 private:
  void let_go(int64_t generation, int64_t slot);
  void allocate(int64_t slots, int64_t slot_bytes, at::Device device);

  mutable std::mutex mutex_;
  at::Tensor buffer_;  // bytes: slots_ × slot_bytes_
  int64_t slots_ = 0, slot_bytes_ = 0, generation_ = 0, reset_generation_ = 0;
  std::vector<int64_t> free_;        // slots of the current buffer not held
  int64_t held_ = 0, peak_held_ = 0;  // in every buffer
  bool grew_ = false;                 // since the buffer was last allocated exactly
  int64_t allocations_ = 0;
};

ContiguousActivations& contiguous_activations();  // the process's (the engine turns it on)
bool contiguous_enabled();

}  // namespace zero::checkpointing
