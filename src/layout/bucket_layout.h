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
  int64_t numel = 0;         // sum of the parameters' elements
  int64_t padded = 0;        // numel rounded up to world_size × alignment
  int64_t shard = 0;         // padded / world_size: what each rank owns
  int64_t owned_offset = 0;  // where this bucket's shard starts in a rank's owned buffer
};

// The part of a parameter one rank owns.
struct Fragment {
  int64_t param_begin = 0, param_end = 0;  // element range within the parameter
  int64_t owned_offset = 0;                // where param_begin sits in the rank's owned buffer
};

class BucketLayout {
 public:
  // numels[i] is parameter i's element count; `order` lists parameter indices in layout order
  // (empty: 0..n-1). alignment >= 1, bucket_elements >= 1. `groups` (empty: none) gives each
  // parameter a group; a bucket never spans two groups (stage 3: a bucket per unit).
  BucketLayout(const std::vector<int64_t>& numels, int world_size, int64_t alignment, int64_t bucket_elements,
               const std::vector<int>& order = {}, const std::vector<int>& groups = {});

  int world_size() const { return world_size_; }
  // Which shard of every bucket the rank `rank` of the communicator owns: its own, or with one
  // partition (stage 0) the only one, whatever its rank.
  int owned_shard(int rank) const { return world_size_ == 1 ? 0 : rank; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const ParamSlot& slot(int param) const { return slots_.at(static_cast<size_t>(param)); }
  size_t num_params() const { return slots_.size(); }

  int64_t numel() const { return numel_; }          // all parameters
  int64_t padded_numel() const { return padded_; }  // all buckets, padding included
  int64_t padding() const { return padded_ - numel_; }
  int64_t owned_numel() const { return padded_ / world_size_; }  // per rank, padding included
  // Elements of real parameters (not padding) in `rank`'s shard of `bucket`, and in all its shards.
  int64_t owned_valid(int bucket, int rank) const;
  int64_t owned_valid(int rank) const;
  // The part of `param` that `rank` owns, if any.
  std::optional<Fragment> fragment(int param, int rank) const;

 private:
  int world_size_;
  std::vector<Bucket> buckets_;
  std::vector<ParamSlot> slots_;
  int64_t numel_ = 0, padded_ = 0;
};

}  // namespace zero::layout
