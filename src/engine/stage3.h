// Stage 3's schedule: which unit each parameter belongs to, and when each unit's bucket is
// gathered, prefetched, kept or freed around its forward and backward (include/zero/unit.h,
// docs/stage3.md). What a gather or a release does is the bucket's (bucket.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/bucket.h"
#include "engine/unit_hooks.h"
#include "zero/unit.h"

namespace zero::engine {

struct UnitMap {
  std::vector<UnitBase*> units;  // in module order
  std::vector<int> group_of;     // per trainable parameter: its unit, or units.size() for the root
};

// Frozen parameters (requires_grad false: a LoRA's base) partitioned like the trainable ones: a
// bucket group of their own per dtype (a QLoRA base has 4-bit codes, fp32 scales and bf16 norms)
// with no gradients (ReducerOptions::Gradients::kNone), each unit's buckets gathered and freed
// with the unit's trainable one.
struct FrozenGroup {
  BucketGroup* buckets = nullptr;
  std::vector<int> group_of;  // per parameter of the group: its unit (index into UnitMap::units), or the root
};
struct FrozenUnits {
  std::vector<FrozenGroup> groups;  // empty: no frozen parameters, or they stay whole
  int weight_bits = 0;              // zero_quantized_nontrainable_weights: floating-point gathers in int8
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

class Stage3 : public detail::UnitHooks {
 public:
  // Stage 3 takes `buckets`: each unit's bucket keeps only this rank's shard (the root stays
  // whole), in memory or, with `shard_swap` (offload_param.device "nvme"), in a swap file; the
  // units are attached to this schedule.
  // `frozen`: the frozen parameters' group, sharded here too.
  Stage3(BucketGroup& buckets, UnitMap map, Stage3Limits limits, std::optional<SwapOptions> shard_swap = std::nullopt,
         Stage3Zeropp zeropp = {}, FrozenUnits frozen = {});
  ~Stage3() override;  // detaches the units (their parameters stay freed)

  void before_forward(UnitBase& unit) override;
  at::Tensor after_forward(UnitBase& unit, at::Tensor output) override;
  // A unit's frozen parameters have no gradient to say when its backward is over: its input passes
  // through an identity whose backward (the gradient of the input: every op of the unit that
  // leads there is done) frees them (FSDP2's post-backward). What no input gradient reaches (an
  // input that needs none, as the first layer's under a frozen embedding) goes at end_backward.
  at::Tensor track_input(UnitBase& unit, at::Tensor input) override;
  void release_frozen(int u);
  void end_backward();  // frees every unit's frozen parameters still whole

  // Around Engine::forward: the first one records the order units run in; later ones prefetch the
  // next unit in that order while the current one computes (and backward prefetches the previous
  // one), and keep a unit whole after its forward when its next use (in this forward or in
  // backward, which runs the order in reverse) comes within max_reuse_distance elements. Both
  // only while the units prefetched and kept stay within max_live elements; a gather on demand is
  // never refused, so at most max_live plus one unit is whole. A different order turns both
  // off, with a warning; never stale weights.
  void begin_forward();
  void end_forward();

  // Collective, once per optimizer step: every rank must have gathered the same units in the same
  // order since the last check (same-sized units gathered in different orders would silently mix
  // their shards). An error naming the first difference otherwise. One 16-byte all-reduce.
  void verify_order(const std::vector<std::string>& param_names);
  StepMode mode() const { return mode_; }
  // Unit u's buckets: one per replica group it holds (expert parallelism: a MoE layer's dense
  // weights and its experts, gathered over different groups), gathered and freed together.
  const std::vector<int>& buckets_of_unit(int u) const { return buckets_of_unit_[static_cast<size_t>(u)]; }

 private:
  BucketGroup& buckets_;
  UnitMap map_;
  std::vector<std::vector<int>> buckets_of_unit_;
  std::vector<BucketGroup*> frozen_;  // per frozen group (dtype)
  // Per unit: (frozen group, bucket) pairs.
  std::vector<std::vector<std::pair<int, int>>> frozen_buckets_of_unit_;
  Stage3Limits limits_;
  std::vector<int> order_;        // units in forward order, recorded by the first Engine::forward
  std::vector<int> position_of_;  // unit → its first position in order_ (-1: not run)
  // Per position of order_: elements gathered before the same unit runs again (forward, then
  // backward in reverse order); INT64_MAX when it does not.
  std::vector<int64_t> reuse_distance_;
  StepMode mode_ = StepMode::kRecording;
  bool in_forward_ = false;  // inside Engine::forward (units run outside it are gathered on demand)
  size_t cursor_ = 0;        // units run so far in this forward
  // Starts gathering unit u's sharded buckets ahead of their use when the unit is small enough
  // (stage3_prefetch_bucket_size) and fits under max_live with the units whole.
  void prefetch(int u);
  int64_t elements_of_unit(int u) const;
  int64_t gathered() const;  // elements of unit buckets whole now, trainable and frozen
  void for_each_bucket(int u, const std::function<void(Bucket&)>& fn);
  void record_reuse_distances();
  // The keep-or-free decision after a unit's forward: kept when the recorded order says it runs
  // again within max_reuse_distance elements and the units whole stay within max_live.
  bool keep_after_forward() const;
};

}  // namespace zero::engine
