// Stage 3's unit machinery: which unit each parameter belongs to, and gathering / freeing each
// unit's bucket around its forward and backward (include/zero/unit.h, docs/stage3.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "engine/flat_params.h"
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

class Stage3 : public detail::UnitHooks {
 public:
  // Keeps this rank's shard of every unit's bucket and frees the buckets (the root stays).
  // prefetch_elements: stage3_prefetch_bucket_size (0: no prefetch).
  Stage3(FlatParams& flat, Communicator& comm, int rank, UnitMap map, int64_t prefetch_elements);
  ~Stage3() override;  // detaches the units (their parameters stay freed)

  void before_forward(UnitBase& unit) override;
  at::Tensor after_forward(UnitBase& unit, at::Tensor output) override;
  void on_bucket_complete(int b);  // gradients in: the unit's parameters can go

  // Around Engine::forward: the first one records the order units run in; later ones prefetch the
  // next unit in that order while the current one computes (and backward prefetches the previous
  // one). A different order turns prefetching off, with a warning; never stale weights.
  void begin_forward();
  void end_forward();

  void gather(int b);  // all-gathers bucket b unless it is already whole
  // Collective, once per optimizer step: every rank must have gathered the same units in the same
  // order since the last check (same-sized units gathered in different orders would silently mix
  // their shards). An error naming the first difference otherwise. One 16-byte all-reduce.
  void verify_order(const std::vector<std::string>& param_names);
  void gather_all();
  void release_all();  // every unit but the root
  bool is_root(int b) const { return root_[static_cast<size_t>(b)]; }
  // This rank's persistent shard of a unit's bucket (model dtype); the root's lives in its buffer.
  const at::Tensor& owned(int b) const { return owned_[static_cast<size_t>(b)]; }
  int64_t owned_bytes() const;
  // The most bytes of unit (non-root) parameters gathered at once since construction.
  int64_t gathered_peak() const { return gathered_peak_; }

 private:
  FlatParams& flat_;
  Communicator& comm_;
  int rank_;
  UnitMap map_;
  std::vector<int> bucket_of_unit_;
  std::vector<bool> root_;
  std::vector<at::Tensor> owned_;
  int64_t gathered_ = 0, gathered_peak_ = 0;
  int64_t prefetch_elements_;
  std::vector<int> order_;        // units in forward order, recorded by the first Engine::forward
  std::vector<int> position_of_;  // unit → its first position in order_ (-1: not run)
  bool recorded_ = false, in_forward_ = false, prefetching_ = true;
  size_t cursor_ = 0;
  std::vector<std::shared_ptr<Work>> inflight_;  // per bucket: a prefetch not yet waited for
  void prefetch(int b);
  void wait_inflight(int b);
  // Materialises bucket b, records it in the gather sequence, and all-gathers into it.
  std::shared_ptr<Work> start_gather(int b, bool async);
  std::vector<int64_t> sequence_;  // buckets gathered since the last verify_order
  static constexpr uint64_t kFnvOffset = 14695981039346656037ull, kFnvPrime = 1099511628211ull;  // FNV-1a
  uint64_t sequence_hash_ = kFnvOffset;
  void release(int b);  // a unit's bucket, counted
};

}  // namespace zero::engine
