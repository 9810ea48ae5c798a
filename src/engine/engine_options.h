// How a DeepSpeed config becomes the engine's options, and what the engine checks and says about
// it at start-up (Engine's constructor is the only caller).
#pragma once

#include <c10/core/Device.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/bucket.h"
#include "engine/optimizer_swap.h"
#include "zero/config.h"
#include "zero/engine.h"
#include "zero/world.h"

namespace zero {
class Communicator;
}

namespace zero::engine {

ReducerOptions reducer_options(const Config& config);
Stage3Zeropp stage3_zeropp(const Config& config, Communicator& comm, const World& world);
// Where the optimizer's state (offload_optimizer.device nvme) and the parameters' shards
// (offload_param.device nvme) are swapped; none without NVMe.
std::optional<SwapOptions> swap_options(const Config& config, int rank);
std::optional<SwapOptions> param_swap_options(const Config& config, int rank);
// Errors for combinations the engine refuses (zero::Error naming the key).
void check_config(const Config& config, const World& world);
// Whether the engine partitions experts over their own group (ModelParallelOptions): the groups
// checked against the world and what expert parallelism is not built with yet refused, naming the
// key. `built_partitioned`: the model was built under zero::Init.
bool check_expert_parallel(const ModelParallelOptions& options, const Config& config, const World& world,
                           at::Device device, bool built_partitioned);
// The settings accepted that change nothing here, each said once at start-up.
std::vector<std::string> unhonoured_settings(const Config& config, bool on_gpu);

}  // namespace zero::engine
