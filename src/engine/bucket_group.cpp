// BucketGroup (bucket.h): the buckets, the hooks that tell them a gradient is in, the in-order
// reduction queue and the gradients' home.
#include "engine/bucket.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <limits>

#include "util/debug_buffers.h"
#include "zero/error.h"

namespace zero::engine {
namespace {

// Fires after AccumulateGrad has written a parameter's gradient (a tensor hook on the leaf would
// fire before accumulation: the wrong moment).
class GradientReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradientReadyHook(BucketGroup* group, int param) : group_(group), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    group_->on_gradient(param_);
    return outputs;
  }

 private:
  BucketGroup* group_;
  int param_;
};

}  // namespace

BucketGroup::BucketGroup(FlatParams& flat, Communicator& comm, const ReducerOptions& options, GradientHome home,
                         std::vector<Communicator*> replicas)
    : flat_(flat),
      comm_(comm),
      options_(options),
      element_size_(static_cast<int64_t>(c10::elementSize(flat.dtype()))),
      arrived_(flat.params().size(), 0) {
  replicas.insert(replicas.begin(), &comm);
  comms_ = std::move(replicas);
  const layout::BucketLayout& layout = flat.layout();
  if (static_cast<int>(comms_.size()) != layout.replica_groups())
    throw Error("BucketGroup: a communicator per replica group of the layout");
  for (int g = 0; g < layout.replica_groups(); ++g) {
    const int partitions = layout.partitions_of(g);
    if (partitions != 1 && partitions != comms_[static_cast<size_t>(g)]->size())
      throw Error("BucketGroup: replica group " + std::to_string(g) + "'s buckets are cut into " +
                  std::to_string(partitions) + " shards for " + std::to_string(comms_[static_cast<size_t>(g)]->size()) +
                  " ranks");
    ranks_.push_back(layout.owned_shard(g, comms_[static_cast<size_t>(g)]->rank()));
  }
  if (streamed() && options.whole_buckets)
    throw Error("streamed gradients are reduced into shards, never into whole buckets");
  for (int b = 0; b < static_cast<int>(flat.layout().buckets().size()); ++b) buckets_.emplace_back(*this, b);
  if (options.gradients == ReducerOptions::Gradients::kNone) return;  // frozen: no gradients to keep or hook
  if (streamed()) {
    accumulator_ = home.memory.defined() || home.put
                       ? std::move(home.memory)
                       : at::zeros({flat.layout().owned_numel()}, at::TensorOptions(at::kFloat).device(flat.device()));
    put_ = std::move(home.put);
  } else {
    // One allocation laid out as the parameters' (FlatParams::whole): with one partition it is
    // exactly the owned gradient, handed to the step with no copy (owned_gradients).
    gradients_ = at::zeros_like(flat_.whole());
    for (Bucket& bucket : buckets_) {
      const at::Tensor& params = flat_.buffer(bucket.index());
      bucket.grads_ = gradients_.narrow(0, params.storage_offset() - flat_.whole().storage_offset(), params.numel());
    }
    attach_gradient_views();
  }
  for (size_t i = 0; i < flat_.params().size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(flat_.params()[i]);
    hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<GradientReadyHook>(this, static_cast<int>(i))));
    accumulators_.push_back(std::move(accumulator));
  }
}

BucketGroup::~BucketGroup() {
  drain(true);
  // The model may outlive the engine: its gradient accumulators must not call a dead group.
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
  if (!sharded_) return;
  // Gathering here would be a collective in a destructor (a hang when ranks unwind differently).
  // Freed parameters would crash on first use, so they come back as NaN: loud, not undefined.
  // Engine::gather_parameters() before the engine goes keeps the real weights.
  for (Bucket& bucket : buckets_) {
    const int b = bucket.index();
    flat_.own_aliased(b);  // one partition: the parameters viewed the shard
    if (bucket.state() != ShardState::kSharded) continue;
    flat_.materialize(b);
    // (A frozen 4-bit base's codes are bytes: zeros there.)
    flat_.buffer(b).fill_(at::isFloatingType(flat_.dtype()) ? std::numeric_limits<double>::quiet_NaN() : 0.0);
  }
}

void BucketGroup::shard_parameters(const std::vector<UnitBase*>& unit_of_bucket, std::optional<SwapOptions> shard_swap,
                                   Stage3Zeropp zeropp) {
  sharded_ = true;
  zeropp_ = std::move(zeropp);
  // One partition: every gather is a copy of this rank's own shard, nothing to save by rounding.
  if (comm_.size() == 1) zeropp_.weight_bits = 0;
  if (shard_swap) {
    // Every unit's shard goes to NVMe and out of memory (zero::Init's units let go of theirs too).
    std::vector<int64_t> bytes;
    for (Bucket& bucket : buckets_)
      bytes.push_back(unit_of_bucket[static_cast<size_t>(bucket.index())] ? bucket.layout().shard * element_size_ : 0);
    shard_swap_ = std::make_unique<ShardSwap>(*shard_swap, bytes);
  }
  for (Bucket& bucket : buckets_) bucket.shard_parameters(unit_of_bucket[static_cast<size_t>(bucket.index())]);
  if (shard_swap_) {
    for (Bucket& bucket : buckets_) bucket.spill_shard();
  }
}

void BucketGroup::attach_gradient_views() {
  // Note: .grad as a view into the bucket buffer makes autograd accumulate there in place:
  // contiguous gradients with no copy.
  for (size_t i = 0; i < flat_.params().size(); ++i) {
    const at::Tensor& p = flat_.params()[i];
    const layout::ParamSlot& s = flat_.layout().slot(static_cast<int>(i));
    const at::Tensor& grads = buckets_[static_cast<size_t>(s.bucket)].grads_;
    if (p.grad().defined() &&
        p.grad().data_ptr() == static_cast<char*>(grads.data_ptr()) + s.offset * grads.element_size()) {
      continue;
    }
    at::Tensor view = at::empty({0}, grads.options());
    view.set_(grads.storage(), grads.storage_offset() + s.offset, p.sizes(), c10::contiguous_strides(p.sizes()));
    const_cast<at::Tensor&>(p).mutable_grad() = view;
  }
}

void BucketGroup::begin_backward(bool reduce) {
  reducing_ = reduce;
  for (Bucket& bucket : buckets_) bucket.arrived_ = 0;
  next_launch_ = 0;
  if (streamed()) {
    std::fill(arrived_.begin(), arrived_.end(), 0);
    first_since_zero_ = reduce && stale_;
    for (const auto& p : flat_.params()) const_cast<at::Tensor&>(p).mutable_grad().reset();
  } else {
    attach_gradient_views();  // in case the user reset .grad (Module::zero_grad sets it to none)
  }
}

void BucketGroup::on_gradient(int param) {
  if (!reducing_) return;
  arrived_[static_cast<size_t>(param)] = 1;
  bucket(flat_.layout().slot(param).bucket).grad_ready(param);
  // A complete bucket is reduced now: during backward, asynchronously with overlap_comm (drain
  // then only polls: MPI progresses non-blocking collectives inside MPI calls), else blocking.
  launch_ready();
  drain(!options_.overlap);
}

void BucketGroup::end_backward() {
  if (!reducing_) return;
  for (Bucket& bucket : buckets_) {
    if (bucket.complete()) continue;  // launched already; it may have given its buffer back
    bucket.complete_with_zeros();
  }
  launch_ready();
  drain(true);
  reducing_ = false;
  if (streamed()) stale_ = false;
}

void BucketGroup::launch_ready() {
  while (next_launch_ < size() && bucket(next_launch_).complete()) {
    bucket(next_launch_).start_grad_sync();
    in_flight_.push_back(next_launch_++);
  }
}

void BucketGroup::drain(bool all) {
  while (!in_flight_.empty()) {
    Bucket& oldest = bucket(in_flight_.front());
    if (all) {
      oldest.wait_grad_sync();
    } else if (!oldest.grad_sync_done()) {
      return;
    }
    in_flight_.pop_front();
    oldest.finish_grad_sync();
  }
}

bool BucketGroup::finish_oldest() {
  if (in_flight_.empty()) return false;
  Bucket& oldest = bucket(in_flight_.front());
  oldest.wait_grad_sync();
  in_flight_.pop_front();
  oldest.finish_grad_sync();
  return true;
}

at::Tensor BucketGroup::take_staging() {
  // At most two buffers while reductions can give one back: finish the oldest instead of growing.
  // (More only when every buffer belongs to a bucket still waiting for gradients.)
  while (pool_.empty() && pool_buffers_ >= 2 && finish_oldest()) {
  }
  if (!pool_.empty()) {  // every pooled buffer holds the largest bucket
    at::Tensor buffer = std::move(pool_.back());
    pool_.pop_back();
    return buffer;
  }
  int64_t largest = 0;
  for (const auto& b : flat_.layout().buckets()) largest = std::max(largest, b.padded);
  at::Tensor buffer = at::empty({largest}, at::TensorOptions(flat_.dtype()).device(flat_.device()));
  pool_bytes_ += static_cast<int64_t>(buffer.nbytes());
  ++pool_buffers_;
  return buffer;
}

void BucketGroup::give_back_staging(at::Tensor buffer) { pool_.push_back(std::move(buffer)); }

at::Tensor BucketGroup::to_wire(const at::Tensor& grads) const {
  if (options_.prescale) grads.mul_(1.0 / options_.predivide_factor);
  // communication_data_type: reduce a converted copy, and bring the result back afterwards.
  const bool convert = options_.wire_dtype && *options_.wire_dtype != grads.scalar_type();
  return convert ? grads.to(*options_.wire_dtype) : grads;
}

at::Tensor BucketGroup::owned_gradients() {
  if (!streamed()) {
    if (!flat_.layout().partitioned()) return gradients_.to(at::kFloat);  // fp32: the buffer itself
    std::vector<at::Tensor> shards;
    for (const Bucket& bucket : buckets_) shards.push_back(flat_.shard(bucket.grads_, bucket.index(), bucket.owned_shard()));
    return at::cat(shards).to(at::kFloat);
  }
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

std::vector<at::Tensor> BucketGroup::owned_gradient_views() {
  std::vector<at::Tensor> views;
  if (streamed()) {
    const at::Tensor accumulator = owned_gradients();  // (zeroed first when nothing was reduced)
    if (!accumulator.defined()) return views;
    for (const auto& bucket : flat_.layout().buckets())
      views.push_back(accumulator.narrow(0, bucket.owned_offset, bucket.shard));
    return views;
  }
  for (const Bucket& bucket : buckets_) views.push_back(flat_.shard(bucket.grads_, bucket.index(), bucket.owned_shard()));
  return views;
}

double BucketGroup::averaging_factor() const {
  const double ranks = comm_.size();
  return options_.prescale ? options_.predivide_factor / ranks : 1.0 / ranks;
}

void BucketGroup::zero() {
  if (streamed()) {
    stale_ = true;  // the next reduction overwrites it: no pass here
  } else {
    gradients_.zero_();
  }
}

void BucketGroup::gather_all() {
  for (Bucket& bucket : buckets_) bucket.gather();
}

void BucketGroup::release_all() {
  forget_secondaries();  // backward is over, or the parameters were gathered to be read or changed
  for (Bucket& bucket : buckets_) {
    if (!bucket.persistent()) bucket.release();
  }
}

void BucketGroup::forget_secondaries() {
  for (Bucket& bucket : buckets_) bucket.forget_secondary();
}

void BucketGroup::verify_gather_order(const std::function<std::string(int64_t bucket)>& describe) {
  gather_order_.verify(comm_, describe);
}

void BucketGroup::note_gathered(int64_t elements) {
  gathered_ += elements;
  gathered_peak_ = std::max(gathered_peak_, gathered_);
}

int64_t BucketGroup::gradient_bytes() const {
  const at::Tensor& held = streamed() ? accumulator_ : gradients_;
  return held.defined() ? static_cast<int64_t>(held.nbytes()) : 0;
}

int64_t BucketGroup::gradient_bytes_of(int b) const {
  const at::Tensor& held = streamed() ? accumulator_ : gradients_;
  if (!held.defined()) return 0;
  const layout::Bucket& bucket = buckets_[static_cast<size_t>(b)].layout();
  return (streamed() ? bucket.shard : bucket.padded) * static_cast<int64_t>(held.element_size());
}

int64_t BucketGroup::shard_bytes() const {
  int64_t total = 0;
  for (const Bucket& bucket : buckets_) total += bucket.shard_bytes();
  return total;
}

int64_t BucketGroup::secondary_bytes() const {
  int64_t total = 0;
  for (const Bucket& bucket : buckets_) total += bucket.secondary_bytes();
  return total;
}

}  // namespace zero::engine
