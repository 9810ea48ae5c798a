// Stage 3's unit machinery: which unit each parameter belongs to, and gathering / freeing each
// unit's bucket around its forward and backward (include/zero/unit.h, docs/stage3.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/flat_params.h"
#include "engine/gather_order.h"
#include "engine/shard_swap.h"
#include "engine/unit_hooks.h"
#include "engine/unit_states.h"
#include "zero/communicator.h"
#include "zero/unit.h"

namespace zero::engine {

struct UnitMap {
  std::vector<UnitBase*> units;  // in module order
  std::vector<int> group_of;     // per trainable parameter: its unit, or units.size() for the root
};

// Finds the units of `model`; an error naming the parameter when one belongs to two units.
UnitMap find_units(torch::nn::Module& model, const std::vector<at::Tensor>& params,
                   const std::vector<std::string>& names);

// DeepSpeed's stage-3 knobs, in elements.
struct Stage3Limits {
  int64_t prefetch_bucket = 50'000'000;     // a unit larger than this is never prefetched (0: none is)
  int64_t max_live = 1'000'000'000;         // prefetched and kept units never exceed this together
  int64_t max_reuse_distance = 1'000'000'000;  // keep a unit whole if used again within this many
};

// ZeRO++ at stage 3 (docs/zeropp.md).
struct Stage3Zeropp {
  int weight_bits = 0;  // qwZ: 8 quantizes the gathers units compute with (never a checkpoint's); 0: off
  // hpZ: the ranks (consecutive, within one node) a computed unit's secondary partition is spread
  // over; its later gathers until the next forward come from there. Null: off.
  std::unique_ptr<Communicator> secondary_group;
};

class Stage3 : public detail::UnitHooks {
 public:
  // Keeps this rank's shard of every unit's bucket and frees the buckets (the root stays).
  // `shard_swap` (offload_param.device "nvme"): the shards live in a swap file instead of memory.
  Stage3(FlatParams& flat, Communicator& comm, int rank, UnitMap map, Stage3Limits limits,
         std::optional<SwapOptions> shard_swap = std::nullopt, Stage3Zeropp zeropp = {});
  ~Stage3() override;  // detaches the units (their parameters stay freed)

  void before_forward(UnitBase& unit) override;
  at::Tensor after_forward(UnitBase& unit, at::Tensor output) override;
  void on_bucket_complete(int b);  // gradients in: the unit's parameters can go

  // Around Engine::forward: the first one records the order units run in; later ones prefetch the
  // next unit in that order while the current one computes (and backward prefetches the previous
  // one), and keep a unit whole after its forward when its next use (in this forward or in
  // backward, which runs the order in reverse) comes within max_reuse_distance elements. Both
  // only while the units prefetched and kept stay within max_live elements; a gather on demand is
  // never refused, so at most max_live plus one unit is whole. A different order turns both
  // off, with a warning; never stale weights.
  void begin_forward();
  void end_forward();

  // All-gathers bucket b, exactly (no ZeRO++), unless it is already whole (idempotent).
  void gather(int b);
  void release(int b);  // frees a unit's bucket unless it is already sharded (idempotent; never the root)
  // hpZ: drops every secondary partition (the parameters are about to change, or backward is over).
  void forget_secondaries();
  int64_t secondary_bytes() const;  // hpZ: bytes of secondary partitions held now
  // Collective, once per optimizer step: every rank must have gathered the same units in the same
  // order since the last check (same-sized units gathered in different orders would silently mix
  // their shards). An error naming the first difference otherwise. One 16-byte all-reduce.
  void verify_order(const std::vector<std::string>& param_names);
  void gather_all();
  void release_all();  // every unit but the root
  bool is_root(int b) const { return root_[static_cast<size_t>(b)]; }
  // This rank's persistent shard of a unit's bucket (model dtype); the root's lives in its buffer.
  // On NVMe: a copy read from the swap file.
  at::Tensor shard(int b) const;
  // Elements [offset, offset + values.numel()) of unit bucket b's shard become `values`.
  void write_shard(int b, int64_t offset, const at::Tensor& values);
  // One partition, in memory: a whole unit's parameters view its shard (no copy to make).
  bool buffer_views_shard(int b) const;
  bool shards_swapped() const { return shard_swap_ != nullptr; }
  int64_t shard_file_bytes() const { return shard_swap_ ? shard_swap_->file_bytes() : 0; }
  int64_t shard_spare_bytes() const { return shard_swap_ ? shard_swap_->spare_bytes() : 0; }
  int64_t shard_bytes_read() const { return shard_swap_ ? shard_swap_->bytes_read() : 0; }
  int64_t shard_bytes_written() const { return shard_swap_ ? shard_swap_->bytes_written() : 0; }
  // Makes `view` (same size and dtype, holding the same values) unit bucket b's persistent shard,
  // dropping the old one: an fp32 model's shards become views of the master weights.
  void own_view(int b, at::Tensor view);
  int64_t owned_bytes() const;
  // The most bytes of unit (non-root) parameters gathered at once since construction.
  int64_t gathered_peak() const { return gathered_peak_ * element_size_; }
  ShardState state(int b) const { return states_.at(b); }
  StepMode mode() const { return mode_; }

 private:
  FlatParams& flat_;
  Communicator& comm_;
  int rank_;
  UnitMap map_;
  std::vector<int> bucket_of_unit_;
  std::vector<bool> root_;
  std::vector<at::Tensor> owned_;  // per bucket; undefined for every unit when the shards are swapped
  std::unique_ptr<ShardSwap> shard_swap_;
  std::vector<int64_t> shard_numel_;     // per bucket
  std::vector<at::Tensor> gather_input_;  // per bucket: a swapped shard read for a gather in flight
  // Per bucket: the NVMe read of a prefetched shard (0: none); its all-gather starts when the unit
  // is needed, so the read overlaps the compute before it.
  std::vector<uint64_t> read_ticket_;
  int64_t gathered_ = 0, gathered_peak_ = 0;  // elements of unit buckets whole
  int64_t element_size_;
  Stage3Limits limits_;
  std::vector<int> order_;        // units in forward order, recorded by the first Engine::forward
  std::vector<int> position_of_;  // unit → its first position in order_ (-1: not run)
  // Per position of order_: elements gathered before the same unit runs again (forward, then
  // backward in reverse order); INT64_MAX when it does not.
  std::vector<int64_t> reuse_distance_;
  UnitStates states_{{}};  // per bucket (unit_states.h)
  StepMode mode_ = StepMode::kRecording;
  bool in_forward_ = false;  // inside Engine::forward (units run outside it are gathered on demand)
  size_t cursor_ = 0;        // units run so far in this forward
  Stage3Zeropp zeropp_;  // before inflight_: its group's gathers in flight go first
  std::vector<std::shared_ptr<Work>> inflight_;  // per bucket: the prefetch of a kGathering unit
  std::vector<at::Tensor> secondary_;  // per bucket (hpZ): this rank's part of the unit as last computed with
  std::vector<bool> rounded_;  // per bucket (qwZ): whole with int8-rounded values (an exact gather redoes it)
  // Gathers b for a unit about to compute: ZeRO++'s way when it is on.
  void gather_for_compute(int b);
  void keep_secondary(int b);  // hpZ: before a computed unit is freed
  void prefetch(int b);
  bool fits(int b) const;  // gathering b keeps the units whole within max_live
  int64_t elements(int b) const;
  void record_reuse_distances();
  void wait_inflight(int b);  // kGathering -> kWhole
  // Materialises bucket b, records it in the gather order, and all-gathers into it.
  // `compute`: for a unit about to run (ZeRO++ applies), else exact.
  std::shared_ptr<Work> start_gather(int b, bool async, bool compute = false);
  GatherOrder gather_order_;
  // The keep-or-free decision after a unit's forward: kept when the recorded order says it runs
  // again within max_reuse_distance elements and the units whole stay within max_live.
  bool keep_after_forward() const;
};

}  // namespace zero::engine
