// Stage 3's lifecycle, as explicit states (docs/architecture.md, "Stage 3").
//
// Each unit's bucket is in one ShardState:
//
//   kPersistent  the root (parameters outside every unit, or under the persistence thresholds):
//                whole on every rank, always; it never changes state.
//   kSharded     only this rank's shard exists; the parameters point at no memory.
//   kGathering   an asynchronous all-gather (a prefetch) is writing the bucket.
//   kWhole       gathered, in use; freed when its forward or its gradients are done.
//   kKept        gathered and left whole after its forward, because it is used again soon
//                (stage3_max_reuse_distance); freed at its next release.
//
//   kSharded -> kGathering -> kWhole -> kSharded          (prefetched)
//   kSharded -> kWhole -> kKept -> kSharded               (gathered on demand, kept for reuse)
//
// Setting a state it already has is allowed (gather() and release() are idempotent); any other
// move the diagram lacks is an internal error naming both states.
//
// The forward pass is in one StepMode: kRecording (the first forward records the order units
// run in), kFollowing (later forwards follow that order: prefetch and reuse are on) or kOnDemand
// (the order changed once: every unit is gathered when it runs, never prefetched or kept).
#pragma once

#include <string>
#include <vector>

namespace zero::engine {

enum class ShardState { kPersistent, kSharded, kGathering, kWhole, kKept };
enum class StepMode { kRecording, kFollowing, kOnDemand };
const char* to_string(ShardState state);

class UnitStates {
 public:
  // One entry per bucket; `persistent[b]`: bucket b is the root, the rest start sharded.
  explicit UnitStates(const std::vector<bool>& persistent);
  ShardState at(int b) const { return states_[static_cast<size_t>(b)]; }
  // Throws zero::Error ("internal: ...") for a move the lifecycle does not have.
  void set(int b, ShardState to);
  static bool allowed(ShardState from, ShardState to);
  // The parameters of bucket b hold their values (whole, kept or persistent; not sharded or
  // still being gathered).
  bool usable(int b) const;
  size_t size() const { return states_.size(); }

 private:
  std::vector<ShardState> states_;
};

}  // namespace zero::engine
