#include "models/finetune/sft_batches.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace zero::finetune {

SftBatches::SftBatches(const std::vector<Example>& examples, int64_t micro_batch, int world, int64_t accumulation,
                       uint64_t seed, int32_t pad_id, int64_t pad_to_multiple_of, int64_t max_seq)
    : examples_(examples),
      micro_(micro_batch),
      accumulation_(accumulation),
      world_(world),
      seed_(seed),
      pad_id_(pad_id),
      pad_multiple_(std::max<int64_t>(1, pad_to_multiple_of)),
      max_seq_(max_seq) {
  const auto n = static_cast<int64_t>(examples.size());
  steps_per_epoch_ = (n + global_rows() - 1) / global_rows();
}

const std::vector<int64_t>& SftBatches::order(int64_t epoch) const {
  if (epoch != cached_epoch_) {
    // Fisher-Yates with mt19937_64 (whose output the standard fixes), so every rank and machine
    // draws the same order.
    std::mt19937_64 random(seed_ * 1000003ULL + static_cast<uint64_t>(epoch));
    cached_order_.resize(examples_.size());
    std::iota(cached_order_.begin(), cached_order_.end(), 0);
    for (size_t i = cached_order_.size(); i > 1; --i) std::swap(cached_order_[i - 1], cached_order_[random() % i]);
    cached_epoch_ = epoch;
  }
  return cached_order_;
}

const Example& SftBatches::example_at(int64_t step, int64_t position_in_epoch) const {
  const std::vector<int64_t>& o = order(step / steps_per_epoch_);
  return examples_[static_cast<size_t>(o[static_cast<size_t>(position_in_epoch % static_cast<int64_t>(o.size()))])];
}

std::vector<int64_t> SftBatches::global_batch(int64_t step) const {
  std::vector<int64_t> out;
  const int64_t first = (step % steps_per_epoch_) * global_rows();
  const std::vector<int64_t>& o = order(step / steps_per_epoch_);
  for (int64_t i = 0; i < global_rows(); ++i) out.push_back(o[static_cast<size_t>((first + i) % static_cast<int64_t>(o.size()))]);
  return out;
}

MicroBatch SftBatches::micro_batch(int64_t step, int64_t micro_step, int rank) const {
  // Rank r's k-th example of the epoch is the permutation's (k·world + r)-th.
  const int64_t first_k = ((step % steps_per_epoch_) * accumulation_ + micro_step) * micro_;
  std::vector<const Example*> rows;
  for (int64_t k = first_k; k < first_k + micro_; ++k) rows.push_back(&example_at(step, k * world_ + rank));
  MicroBatch batch;
  batch.rows = micro_;
  for (const Example* e : rows) batch.seq = std::max<int64_t>(batch.seq, static_cast<int64_t>(e->ids.size()));
  batch.seq = std::max(batch.seq, std::min(max_seq_, (batch.seq + pad_multiple_ - 1) / pad_multiple_ * pad_multiple_));
  batch.inputs.assign(static_cast<size_t>(batch.rows * batch.seq), pad_id_);
  batch.targets.assign(batch.inputs.size(), kIgnoreIndex);
  for (size_t r = 0; r < rows.size(); ++r) {
    const Example& e = *rows[r];
    const size_t base = r * static_cast<size_t>(batch.seq);
    std::copy(e.ids.begin(), e.ids.end(), batch.inputs.begin() + static_cast<std::ptrdiff_t>(base));
    // transformers shifts inside the model: position t predicts label t + 1.
    for (size_t t = 0; t + 1 < e.labels.size(); ++t) batch.targets[base + t] = e.labels[t + 1];
  }
  return batch;
}

int64_t SftBatches::learned_tokens(int64_t step) const {
  int64_t count = 0;
  for (int64_t index : global_batch(step)) {
    const Example& e = examples_[static_cast<size_t>(index)];
    count += std::count_if(e.labels.begin() + 1, e.labels.end(), [](int32_t l) { return l != kIgnoreIndex; });
  }
  return count;
}

}  // namespace zero::finetune
