#include "engine/expert_view.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstring>

#include "zero/error.h"

namespace zero::engine {

ExpertView exchange_expert_view(Communicator& world, Communicator& expert_parallel, Communicator& expert_data_parallel,
                                const std::vector<std::string>& names) {
  ExpertView view;
  // Each expert-parallel group exchanges its members' lists (every group holds the same experts
  // at the same ranks, so any group's lists serve).
  const std::string mine = nlohmann::json(names).dump();
  for (int e = 0; e < expert_parallel.size(); ++e) {
    at::Tensor length = at::full({1}, static_cast<int64_t>(mine.size()), at::kLong);
    expert_parallel.broadcast(length, e, {.async = false});
    at::Tensor bytes = at::zeros({length.item<int64_t>()}, at::kByte);
    if (e == expert_parallel.rank()) std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
    expert_parallel.broadcast(bytes, e, {.async = false});
    view.names.push_back(nlohmann::json::parse(std::string(static_cast<const char*>(bytes.data_ptr()),
                                                           static_cast<size_t>(bytes.numel())))
                             .get<std::vector<std::string>>());
    if (view.names.back().size() != names.size())
      throw Error("expert parallelism: expert-parallel rank " + std::to_string(e) + " holds " +
                      std::to_string(view.names.back().size()) + " parameters, this rank " + std::to_string(names.size()),
                  "expert_parallel.autoep_size");
  }
  at::Tensor place = at::tensor({static_cast<int64_t>(expert_parallel.rank()), static_cast<int64_t>(expert_data_parallel.rank())},
                                at::kLong);
  at::Tensor all = at::zeros({2 * world.size()}, at::kLong);
  world.all_gather(place, all, {.async = false});
  for (int r = 0; r < world.size(); ++r) {
    view.expert_rank_of.push_back(static_cast<int>(all[2 * r].item<int64_t>()));
    view.expert_data_rank_of.push_back(static_cast<int>(all[2 * r + 1].item<int64_t>()));
  }
  return view;
}

}  // namespace zero::engine
