// ReductionLauncher — the order reductions start in, whatever order autograd produces gradients
// in: bucket b's reduction is launched once b is complete and every bucket before it has been
// launched, so all ranks issue the same collectives in the same order. It keeps the launched
// reductions in a window and finishes them oldest first. What a reduction does is the gradient
// strategy's (gradient_strategy.h); this class knows only counts and order.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "layout/bucket_layout.h"
#include "zero/communicator.h"

namespace zero::engine {

struct PendingReduction {
  std::shared_ptr<Work> work;
  std::function<void()> finish;  // after the collective completes; may be empty
};

class ReductionLauncher {
 public:
  using Launch = std::function<PendingReduction(int bucket)>;
  ReductionLauncher(const layout::BucketLayout& layout, Launch launch);
  ~ReductionLauncher();  // waits for what is in flight

  void begin();  // a new micro-step: no gradient has arrived
  // One more gradient of bucket b; true when that completes it.
  bool arrive(int b);
  bool complete(int b) const;
  void mark_complete(int b);  // end of backward: the gradients it still lacks will not come
  void launch_ready();        // launches complete buckets, in order, up to the first incomplete one
  // Finishes the window: all of it (waiting), or only the reductions already complete, oldest first.
  void drain(bool all);
  bool finish_oldest();  // waits for the oldest reduction and finishes it; false when none is in flight
  bool idle() const { return pending_.empty(); }

 private:
  const layout::BucketLayout& layout_;
  Launch launch_;
  std::vector<int> ready_;  // gradients arrived this micro-step, per bucket
  int next_ = 0;            // the next bucket to launch
  std::deque<PendingReduction> pending_;
};

}  // namespace zero::engine
