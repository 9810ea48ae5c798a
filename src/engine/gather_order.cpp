#include "engine/gather_order.h"

#include <ATen/ATen.h>

#include "zero/error.h"

namespace zero::engine {

void GatherOrder::verify(Communicator& comm, const std::function<std::string(int64_t bucket)>& describe) {
  const auto h = static_cast<int64_t>(hash_);
  at::Tensor extremes = at::tensor({h, ~h}, at::kLong);  // max of h and of ~h: max and min of h
  comm.all_reduce(extremes, ReduceOp::kMax, {.async = false});
  const bool same = extremes[0].item<int64_t>() == ~extremes[1].item<int64_t>();
  std::vector<int64_t> mine = std::move(sequence_);
  sequence_.clear();
  hash_ = kFnvOffset;
  if (same) return;
  // Rare path: collect every rank's sequence to name the first difference.
  at::Tensor length = at::full({1}, static_cast<int64_t>(mine.size()), at::kLong);
  comm.all_reduce(length, ReduceOp::kMax, {.async = false});
  const int64_t n = length.item<int64_t>();
  at::Tensor padded = at::full({n}, -1, at::kLong);
  for (size_t i = 0; i < mine.size(); ++i) padded[static_cast<int64_t>(i)] = mine[i];
  at::Tensor all = at::empty({comm.size() * n}, at::kLong);
  comm.all_gather(padded, all, {.async = false});
  const at::Tensor table = all.view({comm.size(), n});
  auto name = [&](int64_t b) { return b < 0 ? std::string("nothing") : describe(b); };
  for (int64_t i = 0; i < n; ++i) {
    for (int r = 1; r < comm.size(); ++r) {
      const int64_t a = table[0][i].item<int64_t>(), other = table[r][i].item<int64_t>();
      if (a == other) continue;
      throw Error("stage 3: ranks gathered units in different orders: gather #" + std::to_string(i + 1) + " was " +
                      name(a) + " on rank 0 but " + name(other) + " on rank " + std::to_string(r) +
                      "; every rank must run the units in the same order",
                  "zero_optimization.stage", comm.rank());
    }
  }
}

}  // namespace zero::engine
