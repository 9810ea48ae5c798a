// BucketLayout — where every parameter lives in flat buffers, and what each rank owns. Pure
// index arithmetic (no torch, no MPI), so every case is unit-tested.
//
// Parameters are taken in the order given (the engine passes reverse registration order, the
// order backward produces gradients) and packed into buckets of at most `bucket_elements`
// elements; a parameter larger than that gets a bucket of its own, and no parameter is split
// between buckets. Each bucket is padded to a multiple of world_size × alignment and cut into
// world_size equal shards: rank r owns shard r of every bucket. A rank's owned shards, bucket
// after bucket, form its owned buffer (fp32 master weights, optimizer state, gradient slices).
//
// Replica groups (expert parallelism): each parameter may name the group of ranks that hold it
// alike — dense weights the whole data-parallel group, an expert's weights its expert-data-parallel
// group (world ÷ expert-parallel size). A bucket never spans two replica groups; a bucket of group
// g is padded to and cut into that group's partitions, and rank r owns shard (its rank in g) of it.
//
// Note: partitioning per bucket (not over one buffer for the whole model) is what lets every
// gradient bucket be reduced with an equal-chunk reduce-scatter straight into its owners' slices.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace zero::layout {

struct ParamSlot {
  int bucket = 0;
  int64_t offset = 0;  // first element within the bucket
  int64_t numel = 0;
};

struct Bucket {
  std::vector<int> params;   // in layout order
  int replica_group = 0;     // which ranks hold these parameters alike (ReplicaGroups)
  int partitions = 1;        // the shards it is cut into: its replica group's
  int64_t numel = 0;         // sum of the parameters' elements
  int64_t padded = 0;        // numel rounded up to partitions × alignment
  int64_t shard = 0;         // padded / partitions: what each rank owns
  int64_t owned_offset = 0;  // where this bucket's shard starts in a rank's owned buffer
};

// The part of a parameter one rank owns.
struct Fragment {
  int64_t param_begin = 0, param_end = 0;  // element range within the parameter
  int64_t owned_offset = 0;                // where param_begin sits in the rank's owned buffer
};

// Per parameter, its replica group; per group, how many partitions its buckets are cut into (group
// 0's is the layout's world_size). Empty: one group.
struct ReplicaGroups {
  std::vector<int> of_param;
  std::vector<int> partitions;
};

// The order the engine lays n parameters out in (the `order` below): reverse registration order,
// the order backward produces their gradients. With `groups` (stage 3: each parameter's unit),
// group by group — the group whose first parameter was registered latest first (backward completes
// it first) — and within a group the parameters of each replica group together, the lower first
// (`replica_group_of` empty: all in group 0).
std::vector<int> backward_order(size_t n, const std::vector<int>& groups = {},
                                const std::vector<int>& replica_group_of = {});

class BucketLayout {
 public:
  // numels[i] is parameter i's element count; `order` lists parameter indices in layout order
  // (empty: 0..n-1). alignment >= 1, bucket_elements >= 1. `groups` (empty: none) gives each
  // parameter a group; a bucket never spans two groups (stage 3: a bucket per unit).
  BucketLayout(const std::vector<int64_t>& numels, int world_size, int64_t alignment, int64_t bucket_elements,
               const std::vector<int>& order = {}, const std::vector<int>& groups = {},
               const ReplicaGroups& replicas = {});

  // Replica group 0's partitions (every group's, without expert parallelism).
  int world_size() const { return world_size_; }
  int replica_groups() const { return static_cast<int>(partitions_.size()); }
  int partitions_of(int replica_group) const { return partitions_.at(static_cast<size_t>(replica_group)); }
  // Whether some bucket is cut into more than one shard.
  bool partitioned() const;
  // Which shard of replica group 0's buckets the rank `rank` of the communicator owns: its own, or
  // with one partition (stage 0) the only one, whatever its rank.
  int owned_shard(int rank) const { return world_size_ == 1 ? 0 : rank; }
  // The same for a bucket of `replica_group`, from the rank's place in that group.
  int owned_shard(int replica_group, int rank_in_group) const {
    return partitions_of(replica_group) == 1 ? 0 : rank_in_group;
  }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const ParamSlot& slot(int param) const { return slots_.at(static_cast<size_t>(param)); }
  size_t num_params() const { return slots_.size(); }

  int64_t numel() const { return numel_; }          // all parameters
  int64_t padded_numel() const { return padded_; }  // all buckets, padding included
  int64_t padding() const { return padded_ - numel_; }
  int64_t owned_numel() const { return owned_; }  // per rank, padding included
  // Elements of real parameters (not padding) in shard `rank` of `bucket`, and in shard `rank` of
  // every bucket (one replica group).
  int64_t owned_valid(int bucket, int rank) const;
  int64_t owned_valid(int rank) const;
  // The part of `param` that shard `rank` of its bucket holds, if any (`rank`: the owner's place in
  // the parameter's replica group).
  std::optional<Fragment> fragment(int param, int rank) const;
  // The part of `param` a rank owns that owns shard owned_shards[g] of replica group g's buckets.
  std::optional<Fragment> owned_fragment(int param, const std::vector<int>& owned_shards) const {
    return fragment(param, owned_shards.at(static_cast<size_t>(buckets_[static_cast<size_t>(slot(param).bucket)].replica_group)));
  }

 private:
  int world_size_;
  std::vector<int> partitions_;  // per replica group
  std::vector<Bucket> buckets_;
  std::vector<ParamSlot> slots_;
  int64_t numel_ = 0, padded_ = 0, owned_ = 0;
};

}  // namespace zero::layout
