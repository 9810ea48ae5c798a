#include "models/common/peak_rss.h"

#include <sys/resource.h>
#include <torch/torch.h>

#include "zero/zero.h"

namespace zero::models {

std::vector<int64_t> peak_rss_per_rank(World& world) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  at::Tensor rss = torch::full({1}, static_cast<double>(usage.ru_maxrss), torch::kDouble);
  at::Tensor each = torch::zeros({world.size()}, torch::kDouble);
  world.communicator().all_gather(rss, each, {.async = false});
  std::vector<int64_t> out;
  for (int r = 0; r < world.size(); ++r) out.push_back(each[r].item<int64_t>());
  return out;
}

}  // namespace zero::models
