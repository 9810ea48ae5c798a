// Engine::State — what an engine holds, shared by engine.cpp and engine_checkpoint.cpp.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/bucket.h"
#include "engine/expert_view.h"
#include "engine/flat_params.h"
#include "engine/parameter_slices.h"
#include "engine/partition.h"
#include "engine/stage3.h"
#include "engine/telemetry.h"
#include "comm/watchdog.h"
#include "zero/comm_stats.h"
#include "zero/engine.h"
#include "zero/loss_scaler.h"
#include "zero/lr_schedule.h"

namespace zero {

struct Engine::State {
  const Config config;
  World& world;
  std::shared_ptr<CommStats> stats = std::make_shared<CommStats>();
  // A model on a GPU: the collectives for its tensors (comm/device_communicator.h); null on the
  // CPU, where the world's communicator serves.
  std::unique_ptr<Communicator> device_comm;
  CountingCommunicator comm;
  std::unique_ptr<engine::FlatParams> flat;
  // The buckets of flat's layout: gradient hooks, reductions, stage 3's shards (bucket.h).
  std::unique_ptr<engine::BucketGroup> buckets;
  // Stage 3: the frozen parameters (requires_grad false) partitioned as the trainable ones, in a
  // group of their own with no gradients; null when there are none (or they stay whole: stages
  // 0-2, tensor or expert parallelism). frozen_bytes: what they hold whole (stages 0-2).
  // One group per dtype.
  std::vector<std::unique_ptr<engine::FlatParams>> frozen_flat;
  std::vector<std::unique_ptr<engine::BucketGroup>> frozen_buckets;
  int64_t frozen_bytes = 0;
  std::unique_ptr<engine::Stage3> stage3;  // stage 3's schedule; goes before the buckets (it detaches the units)
  // What this rank owns of every bucket: master, moments, gradient accumulator (partition.h).
  std::unique_ptr<engine::Partition> partition;
  LrSchedule schedule;
  LossScaler scaler;
  int64_t micro_steps = 0, global_steps = 0, skipped_steps = 0, applied_steps = 0;
  bool step_applied = false;
  double grad_norm = 0;
  std::vector<std::string> warnings;
  std::vector<std::string> param_names;  // of flat->params(), from the module (checkpoints)
  // Tensor parallelism: the group; the parameters (indices into flat->params()) that every member
  // holds whole, which the gradient norm counts on the group's first member only; and where each
  // parameter's slice sits in the whole parameter (all whole without tensor parallelism).
  World* tensor_parallel = nullptr;
  World* pipeline = nullptr;  // the other stages' ranks (pipeline parallelism), for the norm and overflow
  // Expert parallelism: the expert-parallel group (for the norm at stage 0, where each rank holds
  // its experts whole), the expert-data-parallel group's collectives (counted with the world's),
  // and the expert parameters (indices into flat->params()).
  World* expert_parallel = nullptr;
  std::unique_ptr<CountingCommunicator> expert_data_comm;
  std::vector<int> expert_params;
  std::function<bool(const std::string&)> is_expert;
  engine::ExpertView expert_view;  // the whole model's parameters: every expert-parallel rank's
  std::vector<int> replicated_params;
  std::vector<engine::ParameterSlice> slices;
  torch::nn::Module* model = nullptr;
  bool no_sync = false;             // inside a NoSync
  bool boundary_unreduced = false;  // the boundary micro-step's backward ran under no_sync
  // After `stats` (its listener goes first) and before the watchdog (which reports to it).
  std::unique_ptr<engine::Telemetry> telemetry;
  std::unique_ptr<comm_detail::Watchdog> watchdog;

  State(const Config& c, World& w, std::unique_ptr<Communicator> on_device)
      : config(c),
        world(w),
        device_comm(std::move(on_device)),
        comm(device_comm ? *device_comm : w.communicator(), stats),
        schedule(c.scheduler, c.optimizer),
        scaler(c.fp16) {}
};

}  // namespace zero
