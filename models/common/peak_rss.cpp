#include "models/common/peak_rss.h"

#include <sys/resource.h>
#include <torch/torch.h>

#include "zero/zero.h"

namespace zero::models {

std::vector<int64_t> gather_per_rank(World& world, int64_t value) {
  at::Tensor mine = torch::full({1}, value, torch::kLong);
  at::Tensor each = torch::zeros({world.size()}, torch::kLong);
  world.communicator().all_gather(mine, each, {.async = false});
  std::vector<int64_t> out;
  for (int r = 0; r < world.size(); ++r) out.push_back(each[r].item<int64_t>());
  return out;
}

std::vector<int64_t> peak_rss_per_rank(World& world) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return gather_per_rank(world, usage.ru_maxrss);
}

}  // namespace zero::models
