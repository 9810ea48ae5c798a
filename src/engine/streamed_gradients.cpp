#include "engine/streamed_gradients.h"

#include <ATen/ATen.h>

#include "util/debug_buffers.h"

namespace zero::engine {

StreamedGradients::StreamedGradients(FlatParams& flat, Communicator& comm, const ReducerOptions& options,
                                     ReductionLauncher& launcher, GradientHome home)
    : GradientStrategy(flat, comm, options),
      launcher_(launcher),
      accumulator_(home.memory.defined() || home.put ? std::move(home.memory)
                                                     : at::zeros({flat.layout().owned_numel()},
                                                                 at::TensorOptions(at::kFloat).device(flat.device()))),
      put_(std::move(home.put)),
      arrived_(flat.params().size(), 0),
      staged_(flat.layout().buckets().size()),
      staged_whole_(flat.layout().buckets().size()) {}

void StreamedGradients::begin_backward(bool reduce) {
  std::fill(arrived_.begin(), arrived_.end(), 0);
  first_since_zero_ = reduce && stale_;
  for (const auto& p : flat_.params()) const_cast<at::Tensor&>(p).mutable_grad().reset();
}

at::Tensor StreamedGradients::acquire_bucket(int b) {
  const int64_t padded = flat_.layout().buckets()[static_cast<size_t>(b)].padded;
  // At most two buffers while reductions can give one back: finish the oldest instead of growing.
  // (More only when every buffer belongs to a bucket still waiting for gradients.)
  while (pool_.empty() && pool_buffers_ >= 2 && launcher_.finish_oldest()) {
  }
  at::Tensor buffer;
  for (auto it = pool_.begin(); it != pool_.end(); ++it) {
    if (it->numel() >= padded) {
      buffer = *it;
      pool_.erase(it);
      break;
    }
  }
  if (!buffer.defined()) {
    int64_t largest = 0;
    for (const auto& bucket : flat_.layout().buckets()) largest = std::max(largest, bucket.padded);
    buffer = at::empty({largest}, at::TensorOptions(flat_.dtype()).device(flat_.device()));
    pool_bytes_ += static_cast<int64_t>(buffer.nbytes());
    ++pool_buffers_;
  }
  staged_whole_[static_cast<size_t>(b)] = buffer;
  // Only the padding is zeroed here: every parameter's slot is written by its gradient, or
  // zeroed by fill_missing when it gets none (zeroing the whole bucket would be one more pass).
  const int64_t numel = flat_.layout().buckets()[static_cast<size_t>(b)].numel;
  buffer.narrow(0, numel, padded - numel).zero_();
  return buffer.narrow(0, 0, padded);
}

void StreamedGradients::release_bucket(int b) {
  poison_if_debugging(staged_whole_[static_cast<size_t>(b)]);
  pool_.push_back(std::move(staged_whole_[static_cast<size_t>(b)]));
  staged_whole_[static_cast<size_t>(b)] = at::Tensor();
  staged_[static_cast<size_t>(b)] = at::Tensor();
}

void StreamedGradients::on_gradient(int param) {
  const int b = flat_.layout().slot(param).bucket;
  at::Tensor& p = const_cast<at::Tensor&>(flat_.params()[static_cast<size_t>(param)]);
  if (!staged_[static_cast<size_t>(b)].defined()) staged_[static_cast<size_t>(b)] = acquire_bucket(b);
  flat_.view_of(staged_[static_cast<size_t>(b)], param).copy_(p.grad());
  p.mutable_grad().reset();  // the whole gradient lives only until it is in its bucket
  arrived_[static_cast<size_t>(param)] = 1;
}

void StreamedGradients::fill_missing(int b) {
  if (!staged_[static_cast<size_t>(b)].defined()) staged_[static_cast<size_t>(b)] = acquire_bucket(b);
  for (int p : flat_.layout().buckets()[static_cast<size_t>(b)].params)
    if (!arrived_[static_cast<size_t>(p)]) flat_.view_of(staged_[static_cast<size_t>(b)], p).zero_();
}

PendingReduction StreamedGradients::launch(int b) {
  at::Tensor wire = to_wire(staged_[static_cast<size_t>(b)]);
  at::Tensor shard = flat_.shard(wire, b, rank_);
  const auto& bucket = flat_.layout().buckets()[static_cast<size_t>(b)];
  at::Tensor accumulated = put_ ? at::Tensor() : accumulator_.narrow(0, bucket.owned_offset, bucket.shard);
  // The first reduction since zero() replaces the accumulator's stale contents; an fp32 one is
  // reduce-scattered straight into it (no copy out of the bucket, no add).
  // (Not when the accumulator is in host memory and the bucket on a GPU, ZeRO-Offload: the shard
  // is reduced on the device and comes down once.)
  const bool direct = !put_ && first_since_zero_ && options_.reduce_scatter && wire.scalar_type() == at::kFloat &&
                      accumulated.device() == wire.device();
  auto finish = [this, b, wire, shard, accumulated, direct, first = first_since_zero_, offset = bucket.owned_offset] {
    if (put_) {
      put_(offset, shard, first);
    } else if (!direct) {
      first ? accumulated.copy_(shard) : accumulated.add_(shard.to(accumulated.device()));
    }
    release_bucket(b);
  };
  if (direct) return {comm_.reduce_scatter(wire, accumulated, ReduceOp::kSum, scatter()), std::move(finish)};
  // Either way this rank's shard of `wire` ends up reduced; reduce_scatter: false moves 2x the bytes.
  return {options_.reduce_scatter ? comm_.reduce_scatter(wire, shard, ReduceOp::kSum, scatter())
                                  : comm_.all_reduce(wire, ReduceOp::kSum, collective()),
          std::move(finish)};
}

void StreamedGradients::end_backward() { stale_ = false; }

at::Tensor StreamedGradients::owned_gradients() {
  if (stale_) {  // nothing reduced since zero()
    if (put_) {
      for (const auto& bucket : flat_.layout().buckets())
        put_(bucket.owned_offset, at::zeros({bucket.shard}, at::kFloat), true);
    } else {
      accumulator_.zero_();
    }
    stale_ = false;
  }
  return accumulator_;
}

void StreamedGradients::zero() { stale_ = true; }  // the next reduction overwrites it: no pass here

int64_t StreamedGradients::gradient_bytes() const {
  return accumulator_.defined() ? static_cast<int64_t>(accumulator_.nbytes()) : 0;
}

}  // namespace zero::engine
