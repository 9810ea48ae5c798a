// How zero-finetune deals examples to ranks and micro-steps: the sampler a DeepSpeed user gets
// from the Hugging Face Trainer (a DistributedSampler), made exact.
//
// Each epoch is a permutation of the examples seeded by (seed, epoch), extended by wrapping round
// to a whole number of global batches (as DistributedSampler pads its last round). Rank r takes
// every world-th example starting at r, and its micro-batches are consecutive runs of those, so
// the global batch of a step is one contiguous stretch of the permutation whatever the world size.
// Rows are padded on the right to the longest of their micro-batch (pad positions learn nothing
// and, being last, are attended by no real token). Torch-free.
#pragma once

#include <cstdint>
#include <vector>

#include "models/finetune/instruction_data.h"

namespace zero::finetune {

struct MicroBatch {
  int64_t rows = 0, seq = 0;
  std::vector<int64_t> inputs;   // [rows, seq]
  std::vector<int64_t> targets;  // [rows, seq]: the next token's label, kIgnoreIndex where nothing is learned
};

class SftBatches {
 public:
  // pad_to_multiple_of: each micro-batch's length is rounded up to a multiple of it (at most
  // max_seq), as transformers' data collators do.
  SftBatches(const std::vector<Example>& examples, int64_t micro_batch, int world, int64_t accumulation,
             uint64_t seed, int32_t pad_id, int64_t pad_to_multiple_of = 1, int64_t max_seq = INT64_MAX);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t global_rows() const { return micro_ * world_ * accumulation_; }
  // Rank `rank`'s rows for micro-step `micro_step` of optimizer step `step` (0-based from the
  // start of training: epoch step / steps_per_epoch).
  MicroBatch micro_batch(int64_t step, int64_t micro_step, int rank) const;
  // Tokens learned in the whole global batch of `step` (all ranks and micro-steps): what the
  // step's loss is averaged over.
  int64_t learned_tokens(int64_t step) const;
  // The examples of `step`'s global batch, in order.
  std::vector<int64_t> global_batch(int64_t step) const;

 private:
  const std::vector<int64_t>& order(int64_t epoch) const;
  const Example& example_at(int64_t step, int64_t position_in_epoch) const;

  const std::vector<Example>& examples_;
  int64_t micro_, accumulation_;
  int world_;
  uint64_t seed_;
  int32_t pad_id_;
  int64_t pad_multiple_, max_seq_;
  int64_t steps_per_epoch_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_order_;
};

}  // namespace zero::finetune
