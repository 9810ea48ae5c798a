#include "engine/bucket.h"

#include <ATen/ATen.h>
#include <c10/util/strides.h>
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

// ---------------------------------------------------------------------------------------------
// Bucket

Bucket::Bucket(BucketGroup& group, int index) : group_(group), index_(index) {}

const layout::Bucket& Bucket::layout() const { return group_.flat_.layout().buckets()[static_cast<size_t>(index_)]; }

int64_t Bucket::elements() const { return layout().padded; }

at::Tensor Bucket::buffer() const { return group_.flat_.buffer(index_); }

void Bucket::shard_parameters(UnitBase* unit) {
  unit_ = unit;
  if (unit == nullptr) return;  // the root: whole on every rank, always
  FlatParams& flat = group_.flat_;
  if (unit->partitioned()) {
    // Built under zero::Init: FlatParams adopted its bucket with no bytes, and the unit kept its
    // shard (or spilled it to NVMe: read when it goes into the swap file, one at a time).
    const PartitionedUnit& p = *unit->partitioned();
    shard_ = p.shard.defined() || group_.shard_swap_ ? p.shard : p.spilled();
  } else {
    shard_ = flat.shard(buffer(), index_, group_.rank_).clone();
    flat.release(index_);
  }
  state_ = ShardLifecycle(ShardState::kSharded);
}

void Bucket::spill_shard() {
  if (persistent()) return;
  group_.shard_swap_->write(index_, shard_.defined() ? shard_ : unit_->partitioned()->spilled(), group_.flat_.dtype());
  shard_ = at::Tensor();
  if (unit_->partitioned()) {  // zero::Init's copy goes too (and its file with `spilled`)
    PartitionedUnit p = *unit_->partitioned();
    p.shard = at::Tensor();
    p.spilled = nullptr;
    unit_->set_partitioned(std::move(p));
  }
}

void Bucket::wait_gather() {
  if (read_ticket_ != 0) {  // a prefetched read: now its gather (prefetches are for units about to compute)
    group_.shard_swap_->wait(read_ticket_);
    read_ticket_ = 0;
    group_.comm_.all_gather(gather_input_, buffer(), {.async = false, .quantize_bits = group_.zeropp_.weight_bits});
    rounded_ = group_.zeropp_.weight_bits > 0;
  }
  if (gather_) {
    gather_->wait();
    gather_.reset();
  }
  gather_input_ = at::Tensor();  // a swapped shard's copy: the gather is done
  if (state() == ShardState::kGathering) state_.set(ShardState::kWhole, index_);
}

std::shared_ptr<Work> Bucket::start_gather(bool async, bool compute) {
  state_.set(async ? ShardState::kGathering : ShardState::kWhole, index_);
  group_.gather_order_.record(index_);
  group_.note_gathered(elements());
  FlatParams& flat = group_.flat_;
  ShardSwap* swap = group_.shard_swap_.get();
  if (group_.comm_.size() == 1 && swap == nullptr) {
    // One partition: the shard is the whole bucket, so the parameters view it (no copy, no
    // second copy of the unit in memory).
    flat.materialize_as(index_, shard_);
    return nullptr;
  }
  flat.materialize(index_);
  const int weight_bits = group_.zeropp_.weight_bits;
  // qwZ rounds what every rank computes with, the secondary partition's copy of it included.
  rounded_ = compute && weight_bits > 0;
  if (compute && secondary_.defined()) {
    // hpZ: the values this unit last computed with, from this rank's group (within the node).
    return group_.zeropp_.secondary_group->all_gather(secondary_, buffer(), {.async = async});
  }
  if (swap != nullptr && async) {
    // A prefetch from NVMe: only the read starts now (wait_gather does the all-gather).
    gather_input_ = swap->read_async(index_, layout().shard, flat.dtype(), read_ticket_);
    return nullptr;
  }
  // On NVMe the shard is read first, and kept until its all-gather is done.
  const at::Tensor input = swap != nullptr ? shard() : shard_;
  if (swap != nullptr) gather_input_ = input;
  // Straight into the buffer the parameters view: no copy_ on them, so autograd's version
  // counters of the saved weights stay as they were.
  return group_.comm_.all_gather(input, buffer(), {.async = async, .quantize_bits = compute ? weight_bits : 0});
}

void Bucket::gather() {
  wait_gather();
  if (state() == ShardState::kSharded) {
    start_gather(/*async=*/false, /*compute=*/false);
  } else if (rounded_) {
    // Whole with qwZ's rounded values (kept for its backward, say): an exact gather is wanted
    // (a checkpoint, gathered parameters that may be changed and written back).
    group_.comm_.all_gather(shard(), buffer(), {.async = false});
    rounded_ = false;
  }
  gather_input_ = at::Tensor();
}

void Bucket::gather_for_compute() {
  wait_gather();
  if (state() != ShardState::kSharded) return;
  start_gather(/*async=*/false, /*compute=*/true);
  gather_input_ = at::Tensor();
}

void Bucket::prefetch() { gather_ = start_gather(/*async=*/true, /*compute=*/true); }

void Bucket::keep() { state_.set(ShardState::kKept, index_); }

void Bucket::release() {
  if (state() == ShardState::kSharded) return;
  wait_gather();  // never free memory a collective still writes
  state_.set(ShardState::kSharded, index_);  // an error for a persistent bucket, which is never freed
  rounded_ = false;
  group_.flat_.release(index_);
  group_.gathered_ -= elements();
}

void Bucket::keep_secondary() {
  const auto& secondary_group = group_.zeropp_.secondary_group;
  if (!secondary_group || secondary_.defined() || state() == ShardState::kSharded) return;
  wait_gather();
  const int64_t part = elements() / secondary_group->size();  // the padded bucket splits evenly: the group divides the world
  secondary_ = buffer().narrow(0, part * secondary_group->rank(), part).clone();
}

void Bucket::forget_secondary() { secondary_ = at::Tensor(); }

at::Tensor Bucket::shard() const {
  if (!group_.shard_swap_ || persistent()) return shard_;
  return group_.shard_swap_->read(index_, layout().shard, group_.flat_.dtype());
}

void Bucket::write_shard(int64_t offset, const at::Tensor& values) {
  if (!group_.shard_swap_) {
    at::Tensor target = shard_.narrow(0, offset, values.numel());
    if (target.data_ptr() != values.data_ptr()) target.copy_(values);  // (an fp32 master's view: already there)
    return;
  }
  if (offset == 0 && values.numel() == layout().shard) {
    group_.shard_swap_->write(index_, values, group_.flat_.dtype());  // all of it: nothing to read first
    return;
  }
  at::Tensor whole = shard();
  whole.narrow(0, offset, values.numel()).copy_(values);
  group_.shard_swap_->write(index_, whole, group_.flat_.dtype());
}

bool Bucket::buffer_views_shard() const {
  return shard_.defined() && state() != ShardState::kSharded && buffer().data_ptr() == shard_.data_ptr();
}

void Bucket::own_view(at::Tensor view) {
  if (persistent() || view.sizes() != shard_.sizes() || view.scalar_type() != shard_.scalar_type()) {
    throw Error("internal: a shard view of another size, type or bucket", "stage3");
  }
  shard_ = std::move(view);
  // A unit built under zero::Init holds its shard too: let it hold the view, so the old bytes go.
  if (unit_->partitioned()) {
    PartitionedUnit p = *unit_->partitioned();
    p.shard = shard_;
    unit_->set_partitioned(std::move(p));
  }
}

int64_t Bucket::shard_bytes() const { return shard_.defined() ? static_cast<int64_t>(shard_.nbytes()) : 0; }

int64_t Bucket::secondary_bytes() const {
  return secondary_.defined() ? static_cast<int64_t>(secondary_.nbytes()) : 0;
}

at::Tensor Bucket::gradient_view(int param) const { return group_.flat_.view_of(grads_, param); }

void Bucket::stage_gradients() {
  if (grads_.defined()) return;
  staging_ = group_.take_staging();
  // Only the padding is zeroed here: every parameter's slot is written by its gradient, or zeroed
  // by complete_with_zeros when it gets none (zeroing the whole bucket would be one more pass).
  staging_.narrow(0, layout().numel, elements() - layout().numel).zero_();
  grads_ = staging_.narrow(0, 0, elements());
}

void Bucket::on_complete() {
  ++group_.completions_;
  if (group_.sharded_ && !persistent()) release();  // gradients in: the unit's parameters can go
}

bool Bucket::grad_ready(int param) {
  if (group_.streamed()) {
    at::Tensor& p = const_cast<at::Tensor&>(group_.flat_.params()[static_cast<size_t>(param)]);
    stage_gradients();
    gradient_view(param).copy_(p.grad());
    p.mutable_grad().reset();  // the whole gradient lives only until it is in its bucket
  }
  // (In bucket buffers autograd accumulated through the .grad view: nothing to copy.)
  if (++arrived_ != static_cast<int>(layout().params.size())) return false;
  on_complete();
  return true;
}

bool Bucket::complete() const { return arrived_ == static_cast<int>(layout().params.size()); }

void Bucket::complete_with_zeros() {
  if (group_.streamed()) {
    stage_gradients();
    for (int p : layout().params)
      if (!group_.arrived_[static_cast<size_t>(p)]) gradient_view(p).zero_();
  }
  // (In bucket buffers a gradient that never came is the buffer's zeros.)
  arrived_ = static_cast<int>(layout().params.size());
  on_complete();
}

void Bucket::start_grad_sync() {
  const ReducerOptions& o = group_.options_;
  Communicator& comm = group_.comm_;
  const FlatParams& flat = group_.flat_;
  Reduction& r = reduction_;
  r = Reduction{};
  r.wire = group_.to_wire(grads_);
  if (!group_.streamed() && o.whole_buckets) {
    r.work = comm.all_reduce(r.wire, ReduceOp::kSum, group_.collective());
    return;
  }
  r.shard = flat.shard(r.wire, index_, group_.rank_);
  if (group_.streamed()) {
    r.first = group_.first_since_zero_;
    if (!group_.put_) r.accumulated = group_.accumulator_.narrow(0, layout().owned_offset, layout().shard);
    // The first reduction since zero() replaces the accumulator's stale contents; an fp32 one is
    // reduce-scattered straight into it (no copy out of the bucket, no add).
    // (Not when the accumulator is in host memory and the bucket on a GPU, ZeRO-Offload: the
    // shard is reduced on the device and comes down once.)
    r.direct = !group_.put_ && r.first && o.reduce_scatter && r.wire.scalar_type() == at::kFloat &&
               r.accumulated.device() == r.wire.device();
    if (r.direct) {
      r.work = comm.reduce_scatter(r.wire, r.accumulated, ReduceOp::kSum, group_.scatter());
      return;
    }
  }
  // Into this rank's shard of `wire` (in bucket buffers: of the bucket itself). Either way that
  // shard ends up reduced; reduce_scatter: false moves 2x the bytes.
  r.work = o.reduce_scatter ? comm.reduce_scatter(r.wire, r.shard, ReduceOp::kSum, group_.scatter())
                            : comm.all_reduce(r.wire, ReduceOp::kSum, group_.collective());
}

bool Bucket::grad_sync_done() { return reduction_.work->test(); }

void Bucket::wait_grad_sync() { reduction_.work->wait(); }

void Bucket::finish_grad_sync() {
  Reduction& r = reduction_;
  if (!group_.streamed()) {
    // communication_data_type: the reduced copy back into the gradients.
    if (!r.wire.is_same(grads_)) {
      if (group_.options_.whole_buckets) {
        grads_.copy_(r.wire);
      } else {
        group_.flat_.shard(grads_, index_, group_.rank_).copy_(r.shard);
      }
    }
  } else {
    if (group_.put_) {
      group_.put_(layout().owned_offset, r.shard, r.first);
    } else if (!r.direct) {
      r.first ? r.accumulated.copy_(r.shard) : r.accumulated.add_(r.shard.to(r.accumulated.device()));
    }
    poison_if_debugging(staging_);
    group_.give_back_staging(std::move(staging_));
    staging_ = at::Tensor();
    grads_ = at::Tensor();
  }
  r = Reduction{};
}

at::Tensor Bucket::owned_parameters() const {
  return persistent() ? group_.flat_.shard(buffer(), index_, group_.rank_) : shard();
}

void Bucket::write_owned(int64_t offset, const at::Tensor& values) {
  if (!persistent()) {
    const int64_t shard_numel = layout().shard;
    if (!group_.shard_swap_ || (offset == 0 && values.numel() == shard_numel)) {
      write_shard(offset, values);
    } else {
      // Tiles come in order and cover the owned buffer: the shard completes at its last piece.
      at::Tensor& pending = group_.pending_shard_;
      if (pending.numel() < shard_numel) pending = at::empty({shard_numel}, group_.flat_.dtype());
      pending.narrow(0, offset, values.numel()).copy_(values);
      if (offset + values.numel() == shard_numel) write_shard(0, pending.narrow(0, 0, shard_numel));
    }
    // Sharded: the unit's next forward gathers it. Whole at one rank: the parameters view the
    // shard, which holds them now.
    if (state() == ShardState::kSharded || buffer_views_shard()) return;
  }
  group_.flat_.shard(buffer(), index_, group_.rank_).narrow(0, offset, values.numel()).copy_(values);
}

// At most allgather_bucket_size elements per collective: a piece takes the same columns of every
// rank's shard.
void Bucket::sync_parameters() {
  if (!persistent() && (state() == ShardState::kSharded || buffer_views_shard())) return;
  const int n = group_.flat_.layout().world_size();
  if (n == 1) return;
  const at::Tensor whole = buffer();
  const int64_t shard = layout().shard;
  const int rank = group_.rank_;
  const int64_t limit = group_.options_.allgather_bucket_size;
  // 0: no limit (DeepSpeed's usual all_gather_into_tensor path ignores the size too).
  const int64_t columns = limit == 0 ? shard : std::max<int64_t>(1, limit / n);
  if (columns >= shard) {
    group_.comm_.all_gather(group_.flat_.shard(whole, index_, rank), whole, {.async = false});
    return;
  }
  const at::Tensor rows = whole.view({n, shard});
  at::Tensor staging = at::empty({n * columns}, whole.options());
  for (int64_t offset = 0; offset < shard; offset += columns) {
    const int64_t width = std::min(columns, shard - offset);
    at::Tensor piece = staging.narrow(0, 0, n * width);
    group_.comm_.all_gather(rows[rank].narrow(0, offset, width), piece, {.async = false});
    rows.narrow(1, offset, width).copy_(piece.view({n, width}));
  }
}

// ---------------------------------------------------------------------------------------------
// BucketGroup

BucketGroup::BucketGroup(FlatParams& flat, Communicator& comm, const ReducerOptions& options, GradientHome home)
    : flat_(flat),
      comm_(comm),
      options_(options),
      rank_(flat.layout().owned_shard(comm.rank())),
      element_size_(static_cast<int64_t>(c10::elementSize(flat.dtype()))),
      arrived_(flat.params().size(), 0) {
  if (streamed() && options.whole_buckets)
    throw Error("streamed gradients are reduced into shards, never into whole buckets");
  for (int b = 0; b < static_cast<int>(flat.layout().buckets().size()); ++b) buckets_.emplace_back(*this, b);
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
    flat_.buffer(b).fill_(std::numeric_limits<double>::quiet_NaN());
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
    if (flat_.layout().world_size() == 1) return gradients_.to(at::kFloat);  // fp32: the buffer itself
    std::vector<at::Tensor> shards;
    for (const Bucket& bucket : buckets_) shards.push_back(flat_.shard(bucket.grads_, bucket.index(), rank_));
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
