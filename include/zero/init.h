// zero::Init — DeepSpeed's zero.Init: build a stage-3 model already partitioned.
//
//   zero::World world = zero::World::from_environment();
//   zero::Config config = zero::Config::from_file("ds.json", {.world_size = world.size()});
//   std::shared_ptr<Gpt> model;
//   {
//     zero::Init init(config, world);
//     torch::manual_seed(seed);  // the same on every rank
//     model = std::make_shared<Gpt>(options);
//   }
//   zero::Engine engine(*model, config, world);
//
// While an Init lives on this thread, every zero::Unit built keeps only this rank's shard of its
// parameters and frees the rest as soon as the unit's constructor ends: the whole model never
// exists on one rank; building it peaks at one unit plus the shards (plus parameters outside the
// units). Every rank builds every unit whole from the same RNG stream, so the weights are exactly
// those of a single process; the engine compares a checksum of each unit across ranks and fails,
// naming the unit and the ranks, when they differ (e.g. seeded differently).
//
// With offload_param.device "nvme" each unit's shard is written to a file under nvme_path as soon
// as the unit is built, so that building never holds every shard in memory (ZeRO-Infinity's
// zero.Init with remote_device "nvme"); the engine moves them into its own swap file one at a time.
//
// Inside the scope the units' parameters are cast to the training dtype (bf16/fp16 from the
// config), and those at or under stage3_param_persistence_threshold stay whole, as the engine
// would decide. The model must be handed to an Engine with the same config and world; reading
// or writing the partitioned weights before that goes through the engine (gather_parameters,
// gathered_parameters). Outside stage 3 an Init does nothing.
#pragma once

#include <memory>

#include "zero/config.h"
#include "zero/world.h"

namespace zero {

class Init {
 public:
  // Scopes do not nest (an error). The config and world must outlive the scope.
  Init(const Config& config, World& world);
  ~Init();
  Init(const Init&) = delete;
  Init& operator=(const Init&) = delete;

 private:
  friend struct InitAccess;
  const Config& config_;
  World& world_;
  int64_t persisted_ = 0;  // elements kept whole so far (stage3_model_persistence_threshold)
  std::shared_ptr<struct InitSpill> spill_;  // offload_param "nvme": where the shards go
};

}  // namespace zero
