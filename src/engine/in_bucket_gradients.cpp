#include "engine/in_bucket_gradients.h"

#include <ATen/ATen.h>
#include <c10/util/strides.h>

namespace zero::engine {

InBucketGradients::InBucketGradients(FlatParams& flat, Communicator& comm, const ReducerOptions& options)
    : GradientStrategy(flat, comm, options) {
  // One allocation laid out as the parameters' (FlatParams::whole): with one partition it is
  // exactly the owned gradient, handed to the step with no copy (owned_gradients).
  whole_ = at::zeros_like(flat_.whole());
  for (size_t b = 0; b < flat_.layout().buckets().size(); ++b) {
    const at::Tensor& params = flat_.buffer(static_cast<int>(b));
    buckets_.push_back(whole_.narrow(0, params.storage_offset() - flat_.whole().storage_offset(), params.numel()));
  }
  attach_gradient_views();
}

void InBucketGradients::attach_gradient_views() {
  // Note: .grad as a view into the bucket buffer makes autograd accumulate there in place:
  // contiguous gradients with no copy.
  for (size_t i = 0; i < flat_.params().size(); ++i) {
    const at::Tensor& p = flat_.params()[i];
    const layout::ParamSlot& s = flat_.layout().slot(static_cast<int>(i));
    const at::Tensor& buffer = buckets_[static_cast<size_t>(s.bucket)];
    if (p.grad().defined() &&
        p.grad().data_ptr() == static_cast<char*>(buffer.data_ptr()) + s.offset * buffer.element_size()) {
      continue;
    }
    at::Tensor view = at::empty({0}, buffer.options());
    view.set_(buffer.storage(), buffer.storage_offset() + s.offset, p.sizes(), c10::contiguous_strides(p.sizes()));
    const_cast<at::Tensor&>(p).mutable_grad() = view;
  }
}

void InBucketGradients::begin_backward(bool) {
  attach_gradient_views();  // in case the user reset .grad (Module::zero_grad sets it to none)
}

PendingReduction InBucketGradients::launch(int b) {
  const at::Tensor& grads = buckets_[static_cast<size_t>(b)];
  at::Tensor wire = to_wire(grads);
  const bool converted = !wire.is_same(grads);
  if (options_.whole_buckets) {
    std::function<void()> finish;
    if (converted) finish = [grads, wire] { grads.copy_(wire); };
    return {comm_.all_reduce(wire, ReduceOp::kSum, collective()), std::move(finish)};
  }
  // Reduced straight into this rank's shard of the bucket itself.
  at::Tensor shard = flat_.shard(wire, b, rank_);
  std::function<void()> finish;
  if (converted) finish = [this, b, grads, shard] { flat_.shard(grads, b, rank_).copy_(shard); };
  // Either way this rank's shard of `wire` ends up reduced; reduce_scatter: false moves 2x the bytes.
  return {options_.reduce_scatter ? comm_.reduce_scatter(wire, shard, ReduceOp::kSum, scatter())
                                  : comm_.all_reduce(wire, ReduceOp::kSum, collective()),
          std::move(finish)};
}

at::Tensor InBucketGradients::owned_gradients() {
  if (flat_.layout().world_size() == 1) return whole_.to(at::kFloat);  // fp32: the buffer itself
  std::vector<at::Tensor> shards;
  for (size_t b = 0; b < buckets_.size(); ++b) shards.push_back(flat_.shard(buckets_[b], static_cast<int>(b), rank_));
  return at::cat(shards).to(at::kFloat);
}

void InBucketGradients::zero() { whole_.zero_(); }

int64_t InBucketGradients::gradient_bytes() const { return static_cast<int64_t>(whole_.nbytes()); }

}  // namespace zero::engine
