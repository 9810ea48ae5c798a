// Stage 3's lifecycle of one bucket's parameters, as explicit states (docs/stage3.md).
//
// Each bucket (bucket.h) is in one ShardState:
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

namespace zero::engine {

enum class ShardState { kPersistent, kSharded, kGathering, kWhole, kKept };
enum class StepMode { kRecording, kFollowing, kOnDemand };
const char* to_string(ShardState state);

// One bucket's state, moved only along the diagram above.
class ShardLifecycle {
 public:
  // kPersistent (stages 0-2, the root) or kSharded (a unit's bucket once stage 3 took its shard).
  explicit ShardLifecycle(ShardState initial = ShardState::kPersistent) : state_(initial) {}
  ShardState get() const { return state_; }
  // Throws zero::Error ("internal: ...", naming `bucket`) for a move the lifecycle does not have.
  void set(ShardState to, int bucket);
  static bool allowed(ShardState from, ShardState to);
  // The parameters hold their values (whole, kept or persistent; not sharded or still being
  // gathered).
  bool usable() const;

 private:
  ShardState state_;
};

}  // namespace zero::engine
