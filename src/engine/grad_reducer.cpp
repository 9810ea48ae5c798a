#include "engine/grad_reducer.h"

#include <ATen/ATen.h>
#include <c10/util/strides.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "util/debug_buffers.h"

namespace zero::engine {
namespace {

// Fires after AccumulateGrad has written a parameter's gradient (a tensor hook on the leaf would
// fire before accumulation: the wrong moment).
class GradientReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradientReadyHook(GradReducer* reducer, int param) : reducer_(reducer), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    reducer_->on_gradient(param_);
    return outputs;
  }

 private:
  GradReducer* reducer_;
  int param_;
};

}  // namespace

GradReducer::GradReducer(FlatParams& flat, Communicator& comm, int stage, bool overlap, bool prescale,
                         double predivide_factor, std::optional<at::ScalarType> wire_dtype, bool reduce_scatter)
    : flat_(flat),
      comm_(comm),
      stage_(stage),
      rank_(flat.layout().world_size() == 1 ? 0 : comm.rank()),
      partitions_(flat.layout().world_size()),
      overlap_(overlap),
      prescale_(prescale),
      predivide_(predivide_factor),
      wire_dtype_(wire_dtype),
      reduce_scatter_(reduce_scatter) {
  const auto& buckets = flat_.layout().buckets();
  ready_.assign(buckets.size(), 0);
  if (stage_ < 2) {
    // One allocation laid out as the parameters' (FlatParams::whole): with one partition it is
    // exactly the owned gradient, handed to the step with no copy (owned_gradients).
    grad_whole_ = at::zeros_like(flat_.whole());
    for (size_t b = 0; b < buckets.size(); ++b) {
      const at::Tensor& params = flat_.buffer(static_cast<int>(b));
      grad_buffers_.push_back(
          grad_whole_.narrow(0, params.storage_offset() - flat_.whole().storage_offset(), params.numel()));
    }
    attach_gradient_views();
  } else {
    accumulator_ = at::zeros({flat_.layout().owned_numel()}, at::kFloat);
    arrived_.assign(flat_.params().size(), 0);
    staged_.resize(buckets.size());
    staged_pool_buffer_.resize(buckets.size());
  }
  for (size_t i = 0; i < flat_.params().size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(flat_.params()[i]);
    hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<GradientReadyHook>(this, static_cast<int>(i))));
    accumulators_.push_back(std::move(accumulator));
  }
}

GradReducer::~GradReducer() {
  drain(true);
  // The model may outlive the engine: its gradient accumulators must not call a dead reducer.
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

void GradReducer::attach_gradient_views() {
  // Note: .grad as a view into the bucket buffer makes autograd accumulate there in place:
  // contiguous gradients with no copy.
  for (size_t i = 0; i < flat_.params().size(); ++i) {
    const at::Tensor& p = flat_.params()[i];
    const layout::ParamSlot& s = flat_.layout().slot(static_cast<int>(i));
    const at::Tensor& buffer = grad_buffers_[static_cast<size_t>(s.bucket)];
    if (p.grad().defined() &&
        p.grad().data_ptr() == static_cast<char*>(buffer.data_ptr()) + s.offset * buffer.element_size()) {
      continue;
    }
    at::Tensor view = at::empty({0}, buffer.options());
    view.set_(buffer.storage(), buffer.storage_offset() + s.offset, p.sizes(), c10::contiguous_strides(p.sizes()));
    const_cast<at::Tensor&>(p).mutable_grad() = view;
  }
}

void GradReducer::begin_backward(bool reduce) {
  reducing_ = reduce;
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(arrived_.begin(), arrived_.end(), 0);
  first_since_zero_ = reduce && accumulator_stale_;
  next_launch_ = 0;
  if (stage_ < 2) {
    attach_gradient_views();  // in case the user reset .grad (Module::zero_grad sets it to none)
  } else {
    for (const auto& p : flat_.params()) const_cast<at::Tensor&>(p).mutable_grad().reset();
  }
}

at::Tensor GradReducer::acquire_bucket(int b) {
  // Returns bucket b's working view; the pool buffer behind it is kept in staged_pool_buffer_.
  const int64_t padded = flat_.layout().buckets()[static_cast<size_t>(b)].padded;
  // At most two buffers while reductions can give one back: finish the oldest instead of growing.
  // (More only when every buffer belongs to a bucket still waiting for gradients.)
  while (pool_.empty() && pool_buffers_ >= 2 && !pending_.empty()) {
    pending_.front().work->wait();
    if (pending_.front().finish) pending_.front().finish();
    pending_.pop_front();
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
    buffer = at::empty({largest}, at::TensorOptions().dtype(flat_.dtype()));
    pool_bytes_ += static_cast<int64_t>(buffer.nbytes());
    ++pool_buffers_;
  }
  staged_pool_buffer_[static_cast<size_t>(b)] = buffer;
  // Only the padding is zeroed here: every parameter's slot is written by its gradient, or
  // zeroed by end_backward when it gets none (zeroing the whole bucket would be one more pass).
  const int64_t numel = flat_.layout().buckets()[static_cast<size_t>(b)].numel;
  buffer.narrow(0, numel, padded - numel).zero_();
  return buffer.narrow(0, 0, padded);
}

void GradReducer::on_gradient(int param) {
  if (!reducing_) return;
  const int b = flat_.layout().slot(param).bucket;
  if (stage_ == 2) {
    at::Tensor& p = const_cast<at::Tensor&>(flat_.params()[static_cast<size_t>(param)]);
    if (!staged_[static_cast<size_t>(b)].defined()) staged_[static_cast<size_t>(b)] = acquire_bucket(b);
    flat_.view_of(staged_[static_cast<size_t>(b)], param).copy_(p.grad());
    p.mutable_grad().reset();  // the whole gradient lives only until it is in its bucket
    arrived_[static_cast<size_t>(param)] = 1;
  }
  if (++ready_[static_cast<size_t>(b)] ==
          static_cast<int>(flat_.layout().buckets()[static_cast<size_t>(b)].params.size()) &&
      on_bucket_complete) {
    on_bucket_complete(b);
  }
  // A complete bucket is reduced now: during backward, asynchronously with overlap_comm (drain
  // then only polls: MPI progresses non-blocking collectives inside MPI calls), else blocking.
  launch_ready_buckets();
  drain(!overlap_);
}

void GradReducer::launch_ready_buckets() {
  const auto& buckets = flat_.layout().buckets();
  while (next_launch_ < static_cast<int>(buckets.size()) &&
         ready_[static_cast<size_t>(next_launch_)] ==
             static_cast<int>(buckets[static_cast<size_t>(next_launch_)].params.size())) {
    launch(next_launch_++);
  }
}

void GradReducer::launch(int b) {
  const CollectiveOptions options{.async = overlap_};
  at::Tensor grads = stage_ < 2 ? grad_buffers_[static_cast<size_t>(b)] : staged_[static_cast<size_t>(b)];
  if (prescale_) grads.mul_(1.0 / predivide_);
  // communication_data_type: reduce a converted copy, and bring the result back afterwards.
  const bool convert = wire_dtype_ && *wire_dtype_ != grads.scalar_type();
  at::Tensor wire = convert ? grads.to(*wire_dtype_) : grads;
  if (stage_ == 0) {
    std::function<void()> finish;
    if (convert) finish = [grads, wire] { grads.copy_(wire); };
    pending_.push_back({comm_.all_reduce(wire, ReduceOp::kSum, options), std::move(finish)});
    return;
  }
  // Reduced straight into this rank's shard of the bucket itself.
  at::Tensor shard = flat_.shard(wire, b, rank_);
  std::function<void()> finish;
  if (stage_ == 2) {
    const auto& bucket = flat_.layout().buckets()[static_cast<size_t>(b)];
    at::Tensor accumulated = accumulator_.narrow(0, bucket.owned_offset, bucket.shard);
    // The first reduction since zero() replaces the accumulator's stale contents; an fp32 one is
    // reduce-scattered straight into it (no copy out of the bucket, no add).
    const bool direct = first_since_zero_ && reduce_scatter_ && wire.scalar_type() == at::kFloat;
    finish = [this, b, wire, shard, accumulated, direct, first = first_since_zero_] {
      if (!direct) first ? accumulated.copy_(shard) : accumulated.add_(shard);
      poison_if_debugging(staged_pool_buffer_[static_cast<size_t>(b)]);
      pool_.push_back(std::move(staged_pool_buffer_[static_cast<size_t>(b)]));
      staged_pool_buffer_[static_cast<size_t>(b)] = at::Tensor();
      staged_[static_cast<size_t>(b)] = at::Tensor();
    };
    if (direct) {
      pending_.push_back({comm_.reduce_scatter(wire, accumulated, ReduceOp::kSum, options), std::move(finish)});
      return;
    }
  } else if (convert) {
    finish = [this, b, grads, shard] { flat_.shard(grads, b, rank_).copy_(shard); };
  }
  // Either way this rank's shard of `wire` ends up reduced; reduce_scatter: false moves 2x the bytes.
  pending_.push_back({reduce_scatter_ ? comm_.reduce_scatter(wire, shard, ReduceOp::kSum, options)
                                      : comm_.all_reduce(wire, ReduceOp::kSum, options),
                      std::move(finish)});
}

void GradReducer::drain(bool all) {
  while (!pending_.empty()) {
    Pending& front = pending_.front();
    if (all) {
      front.work->wait();
    } else if (!front.work->test()) {
      return;
    }
    if (front.finish) front.finish();
    pending_.pop_front();
  }
}

void GradReducer::end_backward() {
  if (!reducing_) return;
  const auto& buckets = flat_.layout().buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const bool was_complete = ready_[b] == static_cast<int>(buckets[b].params.size());
    // Parameters that got no gradient this micro-step contribute zeros. (A complete bucket was
    // launched already, and may have given its buffer back: it needs none.)
    if (stage_ == 2 && !was_complete) {
      if (!staged_[b].defined()) staged_[b] = acquire_bucket(static_cast<int>(b));
      for (int p : buckets[b].params)
        if (!arrived_[static_cast<size_t>(p)]) flat_.view_of(staged_[b], p).zero_();
    }
    ready_[b] = static_cast<int>(buckets[b].params.size());
    if (!was_complete && on_bucket_complete) on_bucket_complete(static_cast<int>(b));
  }
  launch_ready_buckets();
  drain(true);
  reducing_ = false;
  if (stage_ == 2) accumulator_stale_ = false;
}

double GradReducer::averaging_factor() const {
  const double ranks = comm_.size();
  return prescale_ ? predivide_ / ranks : 1.0 / ranks;
}

at::Tensor GradReducer::owned_gradients() {
  at::Tensor grads;
  if (stage_ == 2) {
    if (accumulator_stale_) {  // nothing reduced since zero()
      accumulator_.zero_();
      accumulator_stale_ = false;
    }
    grads = accumulator_;
  } else if (partitions_ == 1) {
    grads = grad_whole_.to(at::kFloat);  // fp32: the buffer itself
  } else {
    std::vector<at::Tensor> shards;
    for (size_t b = 0; b < grad_buffers_.size(); ++b)
      shards.push_back(flat_.shard(grad_buffers_[b], static_cast<int>(b), rank_));
    grads = at::cat(shards).to(at::kFloat);
  }
  return grads;
}

void GradReducer::zero() {
  if (stage_ == 2) {
    accumulator_stale_ = true;  // the next reduction overwrites it: no pass over it here
  } else {
    grad_whole_.zero_();
  }
}

int64_t GradReducer::gradient_bytes() const {
  if (stage_ == 2) return static_cast<int64_t>(accumulator_.nbytes());
  return static_cast<int64_t>(grad_whole_.nbytes());
}

int64_t GradReducer::bucket_bytes() const { return pool_bytes_; }

}  // namespace zero::engine
