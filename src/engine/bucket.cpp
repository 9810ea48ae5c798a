// Bucket (bucket.h): one bucket's shard, gather, gradients and reduction. BucketGroup is in
// bucket_group.cpp.
#include "engine/bucket.h"

#include <ATen/ATen.h>
#include <c10/util/strides.h>

#include <algorithm>

#include "util/debug_buffers.h"
#include "zero/error.h"

namespace zero::engine {

Bucket::Bucket(BucketGroup& group, int index) : group_(group), index_(index) {}

const layout::Bucket& Bucket::layout() const { return group_.flat_.layout().buckets()[static_cast<size_t>(index_)]; }

int64_t Bucket::elements() const { return layout().padded; }

at::Tensor Bucket::buffer() const { return group_.flat_.buffer(index_); }

Communicator& Bucket::comm() const { return group_.comm_of(layout().replica_group); }

int Bucket::owned_shard() const { return group_.owned_shard_of(layout().replica_group); }

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
    shard_ = flat.shard(buffer(), index_, owned_shard()).clone();
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
    comm().all_gather(gather_input_, buffer(), {.async = false, .quantize_bits = group_.zeropp_.weight_bits});
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
  if (layout().partitions == 1 && swap == nullptr) {
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
  return comm().all_gather(input, buffer(), {.async = async, .quantize_bits = compute ? weight_bits : 0});
}

void Bucket::gather() {
  wait_gather();
  if (state() == ShardState::kSharded) {
    start_gather(/*async=*/false, /*compute=*/false);
  } else if (rounded_) {
    // Whole with qwZ's rounded values (kept for its backward, say): an exact gather is wanted
    // (a checkpoint, gathered parameters that may be changed and written back).
    comm().all_gather(shard(), buffer(), {.async = false});
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
  Communicator& comm = this->comm();
  const FlatParams& flat = group_.flat_;
  Reduction& r = reduction_;
  r = Reduction{};
  r.wire = group_.to_wire(grads_);
  if (!group_.streamed() && o.whole_buckets) {
    r.work = comm.all_reduce(r.wire, ReduceOp::kSum, group_.collective());
    return;
  }
  r.shard = flat.shard(r.wire, index_, owned_shard());
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
        group_.flat_.shard(grads_, index_, owned_shard()).copy_(r.shard);
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
  return persistent() ? group_.flat_.shard(buffer(), index_, owned_shard()) : shard();
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
  group_.flat_.shard(buffer(), index_, owned_shard()).narrow(0, offset, values.numel()).copy_(values);
}

// At most allgather_bucket_size elements per collective: a piece takes the same columns of every
// rank's shard.
void Bucket::sync_parameters() {
  if (!persistent() && (state() == ShardState::kSharded || buffer_views_shard())) return;
  const int n = layout().partitions;
  if (n == 1) return;
  const at::Tensor whole = buffer();
  const int64_t shard = layout().shard;
  const int rank = owned_shard();
  const int64_t limit = group_.options_.allgather_bucket_size;
  // 0: no limit (DeepSpeed's usual all_gather_into_tensor path ignores the size too).
  const int64_t columns = limit == 0 ? shard : std::max<int64_t>(1, limit / n);
  if (columns >= shard) {
    comm().all_gather(group_.flat_.shard(whole, index_, rank), whole, {.async = false});
    return;
  }
  const at::Tensor rows = whole.view({n, shard});
  at::Tensor staging = at::empty({n * columns}, whole.options());
  for (int64_t offset = 0; offset < shard; offset += columns) {
    const int64_t width = std::min(columns, shard - offset);
    at::Tensor piece = staging.narrow(0, 0, n * width);
    comm().all_gather(rows[rank].narrow(0, offset, width), piece, {.async = false});
    rows.narrow(1, offset, width).copy_(piece.view({n, width}));
  }
}

}  // namespace zero::engine
