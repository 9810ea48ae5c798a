// Bucket and BucketGroup — the engine's unit of gathering, reduction and parameter sync.
//
// A Bucket is a run of parameters that move together: laid out back to back in one buffer
// (FlatParams owns the bytes), reduced by one collective, and at stage 3 one unit's
// parameters, gathered and freed as one. Everything one bucket has lives in its object: its
// ShardState (the only place that state is kept), this rank's persistent shard, the gather in
// flight, hpZ's secondary copy and qwZ's rounding, where its gradients are (a view into the
// group's gradient buffer at stages 0/1, a pooled staging buffer at stages 2/3), how many of
// its gradients have arrived, and the reduction in flight with what to do when it lands.
//
// Its verbs come in the pairs of Megatron's param-and-grad bucket and FSDP2's parameter group:
//   gather / release                      stage 3: the unit's parameters whole, or only the shard
//   grad_ready                            one more gradient is in (complete: at stage 3 the
//                                         unit's parameters go at once)
//   start_grad_sync / finish_grad_sync    the bucket's reduction, and landing it
//   write_owned / sync_parameters         after the step: this rank's shard in, then everyone's
//
// The BucketGroup holds the buckets and what they share: the gradient hooks, the in-order
// queue of reductions (bucket b's reduction starts once b is complete and every bucket before
// it has started, so all ranks issue the same collectives in the same order; they finish
// oldest first), the gradients' home (the whole gradient buffer at stages 0/1, the staging pool
// and the fp32 accumulator of owned shards at stages 2/3), stage 3's shard swap file and hpZ
// group, and the accounting of what is gathered. Stage 3's schedule (which unit to gather,
// prefetch or keep, and when) is stage3.h's; the optimizer's states are partition.h's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/flat_params.h"
#include "engine/gather_order.h"
#include "engine/shard_state.h"
#include "engine/shard_swap.h"
#include "zero/communicator.h"
#include "zero/unit.h"

namespace torch::autograd {
struct Node;
}

namespace zero::engine {

// How gradients are kept and reduced.
struct ReducerOptions {
  enum class Gradients { kInBucketBuffers, kStreamedIntoShards, kNone };
  // kInBucketBuffers (stages 0/1): parameter .grad tensors are views into the bucket's part of
  // one gradient buffer (autograd accumulates into them in place, across micro-steps too); on
  // the boundary each bucket is all-reduced whole (stage 0) or reduce-scattered into this rank's
  // shard of itself. kStreamedIntoShards (stages 2/3): every micro-step each gradient is copied
  // into its bucket's pooled staging buffer and freed; a complete bucket is reduce-scattered and
  // this rank's shard added into an fp32 accumulator of the owned shards.
  Gradients gradients = Gradients::kInBucketBuffers;
  // Every rank keeps every bucket's whole reduced gradient (stage 0: all-reduce); else each keeps
  // its shard. Only with kInBucketBuffers. kNone: frozen parameters (no gradient, no hook,
  // nothing reduced), a group stage 3 only gathers and frees.
  bool whole_buckets = false;
  bool overlap = false;  // launch reductions during backward, asynchronously (overlap_comm)
  // Multiply gradients by 1/predivide_factor before reducing (prescale_gradients).
  bool prescale = false;
  double predivide_factor = 1.0;
  // The dtype gradients are reduced in (communication_data_type); unset: the model's own.
  std::optional<at::ScalarType> wire_dtype;
  // false: all-reduce each bucket and keep this rank's shard (zero_optimization.reduce_scatter).
  bool reduce_scatter = true;
  // ZeRO++ qgZ (zero_quantized_gradients): reduce-scatters move gradients in this many bits (4);
  // 0: as they are. All-reduces never quantize.
  int quantize_bits = 0;
  // Parameter sync gathers at most this many elements per collective (allgather_bucket_size; 0:
  // no limit).
  int64_t allgather_bucket_size = 0;
};

// Where streamed gradients accumulate: an fp32 tensor of owned_numel elements in host memory,
// or `put`, which takes each bucket's reduced shard in owned order (`replace`: the first
// reduction since zero(), else added to what it holds) — the optimizer's swap file on NVMe
// (gradient_swap.h). Neither: a tensor of the group's own.
struct GradientHome {
  at::Tensor memory;
  std::function<void(int64_t owned_offset, const at::Tensor& shard, bool replace)> put;
};

// ZeRO++ at stage 3 (docs/zeropp.md).
struct Stage3Zeropp {
  int weight_bits = 0;  // qwZ: 8 quantizes the gathers units compute with (never a checkpoint's); 0: off
  // hpZ: the ranks (consecutive, within one node) a computed unit's secondary partition is spread
  // over; its later gathers until the next forward come from there. Null: off.
  std::unique_ptr<Communicator> secondary_group;
};

class BucketGroup;

class Bucket {
 public:
  Bucket(BucketGroup& group, int index);
  int index() const { return index_; }
  const layout::Bucket& layout() const;
  int64_t elements() const;  // padded
  ShardState state() const { return state_.get(); }
  // Whole on every rank, always: stages 0-2, and stage 3's root.
  bool persistent() const { return state() == ShardState::kPersistent; }

  // --- Parameters (stage 3) ---
  // Stage 3 takes the bucket: it keeps this rank's shard of `unit`'s parameters (zero::Init's,
  // when the unit was built partitioned) and frees the rest. The root (`unit` null) stays whole.
  void shard_parameters(UnitBase* unit);
  // The shard into the group's swap file and out of memory (offload_param.device "nvme").
  void spill_shard();
  // Whole with the exact values, unless it is already (idempotent; waits for a prefetch).
  void gather();
  // Whole for a unit about to compute: ZeRO++'s way (qwZ rounding, hpZ's secondary) when on.
  void gather_for_compute();
  // Starts gathering for a compute that comes soon: kSharded -> kGathering. (Whether it may is
  // the schedule's: stage3.h.)
  void prefetch();
  void keep();     // whole after its forward, for a use soon: kWhole -> kKept
  void release();  // frees the parameters unless they are already (idempotent; never persistent)
  void keep_secondary();    // hpZ: before a computed unit is freed
  void forget_secondary();  // hpZ: the parameters are about to change, or backward is over
  // This rank's persistent shard (model dtype); read from NVMe when swapped.
  at::Tensor shard() const;
  // Elements [offset, offset + values.numel()) of the persistent shard become `values`.
  void write_shard(int64_t offset, const at::Tensor& values);
  // One partition, in memory: the whole parameters view the shard (no copy to make).
  bool buffer_views_shard() const;
  // Makes `view` (same size and dtype, the same values) the persistent shard: an fp32 model's
  // shards become views of the master weights.
  void own_view(at::Tensor view);
  int64_t shard_bytes() const;
  int64_t secondary_bytes() const;

  // --- Gradients ---
  // Parameter `param` (of this bucket) has its gradient for this micro-step; true when that
  // completes the bucket (then, at stage 3, the unit's parameters are released).
  bool grad_ready(int param);
  bool complete() const;
  // End of backward: the parameters without a gradient this micro-step contribute zeros.
  void complete_with_zeros();
  void start_grad_sync();
  bool grad_sync_done();  // the reduction in flight has completed (polls)
  void wait_grad_sync();  // waits until it has
  // Lands the completed reduction: into the owned gradients; the staging buffer goes back.
  void finish_grad_sync();

  // --- Parameter sync (after the optimizer step) ---
  // This rank's shard of the parameters (a copy from NVMe when swapped).
  at::Tensor owned_parameters() const;
  // Elements [offset, offset + values.numel()) of this rank's shard become `values`: in the
  // persistent shard at stage 3, and in the parameters when they are whole.
  void write_owned(int64_t offset, const at::Tensor& values);
  // Every rank's shard to every rank (in allgather_bucket_size pieces), unless the parameters
  // are only a shard now (stage 3: the unit gathers it when it runs).
  void sync_parameters();

 private:
  friend class BucketGroup;
  // Materialises the parameters, records the gather, and all-gathers into them. `compute`: for
  // a unit about to run (ZeRO++ applies), else exact. Null when it is done or only a read started.
  std::shared_ptr<Work> start_gather(bool async, bool compute);
  void wait_gather();  // kGathering -> kWhole
  at::Tensor buffer() const;
  // The ranks holding these parameters alike (the bucket's replica group), and which of the
  // bucket's shards this rank owns.
  Communicator& comm() const;
  int owned_shard() const;
  at::Tensor gradient_view(int param) const;  // parameter `param`'s slot in the gradients
  void stage_gradients();  // streamed: a staging buffer from the pool, unless it has one
  void on_complete();      // every gradient is in (stage 3: the parameters go)

  BucketGroup& group_;
  int index_;
  ShardLifecycle state_;
  UnitBase* unit_ = nullptr;  // stage 3: the unit whose parameters these are (null: the root)
  // Stage 3: this rank's persistent shard; undefined for the root, and when swapped to NVMe.
  at::Tensor shard_;
  std::shared_ptr<Work> gather_;  // a prefetch's all-gather in flight (kGathering)
  // A prefetch from NVMe: the read in flight (0: none) and the shard it reads (kept until the
  // gather is done), so that the disk works while the units before this one compute.
  uint64_t read_ticket_ = 0;
  at::Tensor gather_input_;
  at::Tensor secondary_;  // hpZ: this rank's part of the unit as last computed with
  bool rounded_ = false;  // qwZ: whole with int8-rounded values (an exact gather redoes it)
  // Gradients: a view of the group's gradient buffer (in bucket buffers), or the staging buffer
  // taken from the pool when the first gradient arrives (streamed; `staging_` the pool's whole
  // buffer behind it).
  at::Tensor grads_;
  at::Tensor staging_;
  int arrived_ = 0;  // gradients in this micro-step
  // The reduction in flight and what landing it needs.
  struct Reduction {
    std::shared_ptr<Work> work;
    at::Tensor wire;         // what was reduced (a converted copy, or the gradients themselves)
    at::Tensor shard;        // this rank's reduced part of `wire`
    at::Tensor accumulated;  // streamed into memory: the owned gradients' slice for this bucket
    bool direct = false;     // reduce-scattered straight into `accumulated`
    bool first = false;      // the first reduction since zero(): replaces, not adds
  } reduction_;
};

class BucketGroup {
 public:
  // The buckets of `flat`'s layout, each persistent until stage 3 shards it. Attaches a hook to
  // every parameter's gradient accumulator. `home`: where streamed gradients accumulate (the
  // partition's: memory or NVMe); empty: the group allocates its own.
  // `replicas`: the communicator of each replica group after the first (expert parallelism: the
  // expert-data-parallel group), which reduces and gathers that group's buckets; `comm` serves
  // group 0. Gradients of every group are averaged over `comm`'s ranks (averaging_factor).
  BucketGroup(FlatParams& flat, Communicator& comm, const ReducerOptions& options, GradientHome home = {},
              std::vector<Communicator*> replicas = {});
  // Waits for reductions in flight and removes the hooks. Stage 3: parameters still sharded come
  // back as NaN (gathering would be a collective in a destructor).
  ~BucketGroup();
  BucketGroup(const BucketGroup&) = delete;
  BucketGroup& operator=(const BucketGroup&) = delete;

  Bucket& bucket(int b) { return buckets_[static_cast<size_t>(b)]; }
  const Bucket& bucket(int b) const { return buckets_[static_cast<size_t>(b)]; }
  int size() const { return static_cast<int>(buckets_.size()); }
  FlatParams& flat() { return flat_; }
  const FlatParams& flat() const { return flat_; }
  Communicator& comm() { return comm_; }
  // Replica group g's communicator (0: comm()), and the shard of its buckets this rank owns.
  Communicator& comm_of(int replica_group) const { return *comms_[static_cast<size_t>(replica_group)]; }
  int owned_shard_of(int replica_group) const { return ranks_[static_cast<size_t>(replica_group)]; }

  // Stage 3 takes the buckets: `unit_of_bucket[b]` is bucket b's unit (null: the root, which
  // stays whole). `shard_swap`: the shards live in a swap file (offload_param.device "nvme").
  void shard_parameters(const std::vector<UnitBase*>& unit_of_bucket, std::optional<SwapOptions> shard_swap,
                        Stage3Zeropp zeropp);
  bool sharded() const { return sharded_; }  // stage 3
  bool shards_swapped() const { return shard_swap_ != nullptr; }

  // --- Gradients, per micro-step ---
  // Before backward: whether this micro-step's gradients are reduced (streamed: always; in
  // bucket buffers: on the accumulation boundary).
  void begin_backward(bool reduce);
  void on_gradient(int param);  // the hooks: autograd just accumulated `param`'s gradient
  // After backward: completes buckets that missed gradients, launches what is left, waits.
  void end_backward();
  // The reduced gradient of every owned element, fp32, summed over ranks (times
  // averaging_factor() it is the average; the loss was already divided by the accumulation
  // steps). Valid after the boundary's end_backward(). Streamed: the accumulator (undefined
  // when the gradients went to NVMe: the partition reads them from there); in buckets with one
  // partition: the fp32 buffer itself; else a new tensor. The step may scale it in place: zero()
  // follows. The average is left to the caller, which folds it into its own unscale-and-clip
  // multiplication: one pass over the gradients, not two.
  at::Tensor owned_gradients();
  // The same gradients without a copy, bucket by bucket: each bucket's owned elements as a view
  // of the accumulator (streamed; fp32) or of its gradient buffer (in the model's dtype). Empty
  // when the gradients went to NVMe. What Partition::step_from reads a slice at a time.
  std::vector<at::Tensor> owned_gradient_views();
  double averaging_factor() const;
  void zero();  // after the optimizer step (or a skipped one): forget everything accumulated
  int64_t completions() const { return completions_; }  // buckets completed since construction

  // --- Parameters, stage 3 ---
  void gather_all();
  void release_all();  // every bucket but the persistent ones; hpZ's secondaries go too
  void forget_secondaries();
  // Collective, once per optimizer step: every rank gathered the same buckets in the same order
  // since the last check, else an error naming the first difference (gather_order.h).
  void verify_gather_order(const std::function<std::string(int64_t bucket)>& describe);
  int64_t gathered() const { return gathered_; }  // elements of unit buckets whole now

  // --- What it holds (MemoryReport) ---
  int64_t gradient_bytes() const;  // the gradient buffer (stages 0/1) or the accumulator (2/3)
  int64_t gradient_bytes_of(int b) const;  // bucket b's part of it
  int64_t staging_bytes() const { return pool_bytes_; }
  int64_t shard_bytes() const;      // stage 3's persistent shards in memory
  int64_t secondary_bytes() const;  // hpZ
  int64_t gathered_peak_bytes() const { return gathered_peak_ * element_size_; }
  int64_t shard_file_bytes() const { return shard_swap_ ? shard_swap_->file_bytes() : 0; }
  int64_t shard_spare_bytes() const { return shard_swap_ ? shard_swap_->spare_bytes() : 0; }
  int64_t shard_bytes_read() const { return shard_swap_ ? shard_swap_->bytes_read() : 0; }
  int64_t shard_bytes_written() const { return shard_swap_ ? shard_swap_->bytes_written() : 0; }

 private:
  friend class Bucket;
  bool streamed() const { return options_.gradients == ReducerOptions::Gradients::kStreamedIntoShards; }
  void attach_gradient_views();  // in bucket buffers: every .grad a view of its slot
  void launch_ready();  // starts complete buckets' reductions, in order, up to the first incomplete one
  // Lands reductions oldest first: all of them (waiting), or only those already done.
  void drain(bool all);
  bool finish_oldest();  // waits for the oldest reduction and lands it; false when none is in flight
  at::Tensor take_staging();  // a pooled buffer of the largest bucket's size
  void give_back_staging(at::Tensor buffer);
  // Prescales `grads` in place and returns what goes on the wire (a converted copy or `grads`).
  at::Tensor to_wire(const at::Tensor& grads) const;
  CollectiveOptions collective() const { return {.async = options_.overlap}; }
  CollectiveOptions scatter() const { return {.async = options_.overlap, .quantize_bits = options_.quantize_bits}; }
  void note_gathered(int64_t elements);

  FlatParams& flat_;
  Communicator& comm_;
  ReducerOptions options_;
  std::vector<Communicator*> comms_;  // per replica group
  std::vector<int> ranks_;            // per replica group: the shard this rank owns (0 with one partition)
  int64_t element_size_;

  // Stage 3. Declared before the buckets, so that their gathers in flight go first.
  bool sharded_ = false;
  Stage3Zeropp zeropp_;
  std::unique_ptr<ShardSwap> shard_swap_;
  // Swapped shards written tile by tile: the one being filled, written when complete (a tile's
  // piece alone would cost a read and a write of the whole shard). One buffer for every shard.
  at::Tensor pending_shard_;
  GatherOrder gather_order_;
  int64_t gathered_ = 0, gathered_peak_ = 0;  // elements of unit buckets whole

  std::vector<Bucket> buckets_;

  // Gradients.
  bool reducing_ = false;
  std::vector<char> arrived_;  // per parameter: its gradient came this micro-step
  int next_launch_ = 0;        // the next bucket whose reduction starts
  std::deque<int> in_flight_;  // buckets whose reductions started, oldest first
  int64_t completions_ = 0;
  at::Tensor gradients_;  // in bucket buffers: every bucket's gradients, laid out as FlatParams::whole
  at::Tensor accumulator_;  // streamed: owned shards, fp32 (the partition's); undefined when put_ takes them
  std::function<void(int64_t, const at::Tensor&, bool)> put_;
  // zero() was called and no reduction has landed since: the accumulator's contents are garbage
  // that the next reducing micro-step overwrites (first_since_zero_: this one does).
  bool stale_ = false, first_since_zero_ = false;
  std::vector<at::Tensor> pool_;  // free staging buffers
  int64_t pool_bytes_ = 0;
  int pool_buffers_ = 0;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep the hooked nodes alive
  std::vector<uintptr_t> hook_keys_;
};

}  // namespace zero::engine
