// FlatParams — the model's trainable parameters moved into flat bucket buffers.
//
// Each parameter keeps its tensor object (so modules, optimizers and autograd still hold the
// right thing) but its storage becomes a slice of its bucket's buffer (Tensor::set_ under
// NoGradGuard: it stays a leaf that requires grad). Writing a bucket buffer therefore updates the
// parameters without touching their autograd version counters.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <limits>
#include <vector>

#include "layout/bucket_layout.h"

namespace zero::engine {

class FlatParams {
 public:
  // `params`: distinct trainable parameters of one dtype, in registration order. They are laid
  // out in reverse order (the order backward produces their gradients). With `groups` (stage 3:
  // the unit of each parameter) every group gets its own bucket, groups ordered by when backward
  // completes them (the group whose first-registered parameter comes latest goes first).
  // `adopted[g]`, where defined: group g's bucket as zero::Init left it (bytes freed, parameters
  // already viewing it); taken as it is, released, after checking it has this layout.
  // `replicas` (expert parallelism): each parameter's replica group and each group's partitions
  // (layout/bucket_layout.h); within a stage-3 group the parameters of one replica group come
  // together, so a unit has one bucket per replica group it holds.
  FlatParams(std::vector<at::Tensor> params, int partitions, int64_t bucket_elements,
             const std::vector<int>& groups = {}, const std::vector<at::Tensor>& adopted = {},
             const layout::ReplicaGroups& replicas = {});

  const layout::BucketLayout& layout() const { return layout_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  at::ScalarType dtype() const { return dtype_; }
  // Where the parameters and their buckets live (the model's device: every trainable parameter
  // must be on it).
  at::Device device() const { return device_; }
  // Bucket b's parameter buffer (padded), and `rank`'s shard of it.
  const at::Tensor& buffer(int b) const { return memory_[static_cast<size_t>(b)].buffer; }
  at::Tensor shard(const at::Tensor& bucket_buffer, int b, int rank) const;
  int64_t bytes() const;  // all buffers not released
  int64_t bytes_of(int b) const;  // bucket b's, when held
  // Without groups (stages 0-2): one tensor holding every bucket buffer back to back, in bucket
  // order (so with one partition it is exactly a rank's owned buffer); undefined with groups.
  const at::Tensor& whole() const { return whole_; }

  // Stage 3: frees bucket b's bytes (the parameter tensors stay, pointing at no memory), and
  // allocates them again (contents undefined until written, e.g. by an all-gather).
  //
  // Released bytes are kept as spares (at most kSpareBuffers) that the next materialize reuses:
  // freed to malloc, a unit's buffer would be carved up by the small activations allocated
  // after it and the next unit's buffer would come from fresh memory — measured on an 85 M GPT
  // at stage 3, resident memory grew by a whole unit per unit during forward (+440 MB where
  // 110 MB of activations were live).
  // Whether bucket b is whole is its Bucket's state (bucket.h), not asked here.
  void release(int b);
  void materialize(int b);
  int64_t spare_bytes() const;
  // As materialize, but bucket b's bytes are `memory`'s (same byte size, kept alive by its
  // owner): one partition's "gather" of a shard that is the whole bucket. Not counted in bytes().
  void materialize_as(int b, const at::Tensor& memory);
  // A bucket made by materialize_as gets bytes of its own, holding the same values (before the
  // memory it views goes away).
  void own_aliased(int b);

  // A tensor shaped like parameter p viewing `bucket_buffer` (same layout as the parameter
  // buffers, e.g. the gradient buffer of the same bucket).
  at::Tensor view_of(const at::Tensor& bucket_buffer, int p) const;

 private:
  c10::DataPtr allocate(size_t bytes) const;
  std::vector<at::Tensor> params_;
  layout::BucketLayout layout_;
  at::ScalarType dtype_;
  at::Device device_ = at::kCPU;
  at::Tensor whole_;
  // Where each bucket's bytes are: the allocator's bookkeeping, not the bucket's state.
  struct BucketMemory {
    at::Tensor buffer;    // the parameters view its storage
    bool held = true;     // the storage has bytes (false after release, and for an adopted bucket)
    bool aliased = false;  // materialize_as: the bytes belong to someone else
    size_t capacity = 0;  // the bytes its memory holds (a spare may be larger); 0: never gathered
  };
  std::vector<BucketMemory> memory_;
  struct Spare {
    size_t capacity;
    c10::DataPtr memory;
  };
  std::vector<Spare> spares_;
  static constexpr size_t kSpareBuffers = 2;
  void check_adopted(const at::Tensor& buffer, int b) const;
};

// Alignment, in elements, that makes every shard start on a 32-byte boundary.
int64_t alignment_for(at::ScalarType dtype);

// A bucket size no group reaches (stage 3: one bucket per unit, whatever reduce_bucket_size says).
inline constexpr int64_t kWholeGroupBucket = std::numeric_limits<int64_t>::max() / 4;

}  // namespace zero::engine
