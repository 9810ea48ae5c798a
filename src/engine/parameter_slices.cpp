#include "engine/parameter_slices.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "zero/communicator.h"
#include "zero/error.h"
#include "zero/world.h"

namespace zero::engine {

std::vector<ParameterSlice> slice_parameters(const std::vector<at::Tensor>& params, const std::vector<std::string>& names,
                                             const ModelParallelOptions& options, int rank) {
  std::vector<ParameterSlice> slices(params.size());
  for (size_t i = 0; i < params.size(); ++i) slices[i].whole = params[i].numel();
  if (!options.group || options.group->size() == 1) return slices;
  if (!options.split_dim) throw Error("ModelParallelOptions: split_dim is needed with a group", "split_dim", rank);
  Communicator& group = options.group->communicator();
  const int64_t count = static_cast<int64_t>(params.size());
  at::Tensor mine = at::zeros({count}, at::kLong), sizes = at::zeros({group.size() * count}, at::kLong);
  for (size_t i = 0; i < params.size(); ++i) {
    const int dim = options.split_dim(names[i]);
    if (dim >= params[i].dim()) {
      throw Error("split_dim: " + std::to_string(dim) + " for " + names[i] + " of " + std::to_string(params[i].dim()) +
                      " dimensions",
                  names[i], rank);
    }
    slices[i].dim = std::max(dim, -1);
    mine[static_cast<int64_t>(i)] = dim < 0 ? params[i].numel() : params[i].size(dim);
  }
  group.all_gather(mine, sizes, {.async = false});
  const at::Tensor by_member = sizes.view({group.size(), count});
  for (size_t i = 0; i < params.size(); ++i) {
    if (slices[i].dim < 0) continue;
    const at::Tensor column = by_member.select(1, static_cast<int64_t>(i));
    slices[i].start = column.narrow(0, 0, group.rank()).sum().item<int64_t>();
    slices[i].whole = column.sum().item<int64_t>();
  }
  return slices;
}

}  // namespace zero::engine
