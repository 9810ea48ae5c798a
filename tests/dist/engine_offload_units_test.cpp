// Stage 3's parameter shards on NVMe (offload_param.device "nvme") on a model whose blocks are
// units (the small transformer): read from the swap file for each gather (prefetched ones too),
// written by each step. The same 12 losses and weights, bit for bit, as the run in memory, with
// the optimizer in memory, on the CPU or on NVMe, in fp32 and bf16, at 1-4 ranks; the shards are
// then out of memory; built under zero::Init, the units' shards go to files as they are built;
// the same with every swap file encrypted (encrypt_swap); checkpoints resume between NVMe and
// memory both ways.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tiny_step.h"
#include "zero/engine.h"
#include "zero/init.h"
#include "zero/unit.h"

#include <optional>

namespace {

struct UnitRun {
  std::vector<double> losses;
  std::vector<at::Tensor> weights;
  zero::MemoryReport memory;
  int spilled_units = 0;  // built under zero::Init: units whose shard went to a file, not memory
};

// Steps [first, last) of the run; `load` resumes from a checkpoint there first, `save` writes one
// after step `save_at`.
struct Checkpointing {
  std::string load, save;
  int save_at = -1, first = 0, last = 12;
  bool init = false;          // build the model under zero::Init
  bool encrypt_swap = false;  // "zerocpp": {"encrypt_swap": true}: every swap file AES-256-GCM
};

UnitRun train(const std::string& offload, bool bf16, const Checkpointing& c = {}) {
  zero::models::TinyTransformerOptions o;
  const std::string json = std::string(R"({"train_batch_size": 24, "gradient_clipping": 1.0, )") +
                           (c.encrypt_swap ? R"("zerocpp": {"encrypt_swap": true}, )" : "") + R"("bf16": {"enabled": )" +
                           (bf16 ? "true" : "false") + R"(},
      "zero_optimization": {"stage": 3, "overlap_comm": true, "stage3_param_persistence_threshold": 0,
                            "sub_group_size": 4000)" + offload + R"(},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}}})";
  zero::Config config = zero::Config::parse(json);
  config.resolve({.world_size = test_world().size()});
  UnitRun run;
  std::shared_ptr<zero::models::TinyTransformer> model;
  {
    std::optional<zero::Init> init;
    if (c.init) init.emplace(config, test_world());
    torch::manual_seed(11);
    model = std::make_shared<zero::models::TinyTransformer>(o);
  }
  for (const auto& m : model->modules()) {
    auto* unit = dynamic_cast<zero::UnitBase*>(m.get());
    if (unit && unit->partitioned() && unit->partitioned()->spilled && !unit->partitioned()->shard.defined())
      ++run.spilled_units;
  }
  zero::Engine engine(*model, config, test_world());
  const int64_t micro = config.train_micro_batch_size_per_gpu;
  run.memory = engine.memory_report();
  if (!c.load.empty()) engine.load_checkpoint(c.load);
  for (int step = c.first; step < c.last; ++step) {
    if (step == c.save_at) engine.save_checkpoint(c.save);
    run.losses.push_back(tiny_step(engine, *model, micro, step));
  }
  engine.gather_parameters();
  for (const auto& p : model->parameters()) run.weights.push_back(p.detach().to(torch::kFloat).clone());
  return run;
}

TEST(OffloadNvmeUnits, ParameterShardsOnNvmeAreTheInMemoryRunBitForBit) {
  at::Tensor pid = torch::full({1}, static_cast<int64_t>(getpid()), torch::kLong);
  test_world().communicator().broadcast(pid, 0, {.async = false});
  const auto dir = std::filesystem::temp_directory_path() / ("zero_nvme_units." + std::to_string(pid.item<int64_t>()));
  std::filesystem::create_directories(dir);
  const std::string param = R"(, "offload_param": {"device": "nvme", "nvme_path": ")" + dir.string() + R"("})";
  const std::string optimizer_cpu = R"(, "offload_optimizer": {"device": "cpu"})";
  const std::string optimizer_nvme =
      R"(, "offload_optimizer": {"device": "nvme", "nvme_path": ")" + dir.string() + R"(", "pipeline_read": true})";
  for (bool bf16 : {false, true}) {
    const UnitRun reference = train("", bf16);
    EXPECT_LT(reference.losses.back(), reference.losses.front());
    for (const std::string& offload : {param, optimizer_cpu + param, optimizer_nvme + param}) {
      const UnitRun got = train(offload, bf16);
      const std::string label = std::string(bf16 ? "bf16 " : "fp32 ") + offload;
      for (size_t i = 0; i < got.losses.size(); ++i) EXPECT_EQ(got.losses[i], reference.losses[i]) << label << " step " << i;
      for (size_t i = 0; i < got.weights.size(); ++i) EXPECT_TRUE(got.weights[i].equal(reference.weights[i])) << label;
      // The units' shards left memory for the swap file (each padded to 4096 bytes there).
      const int64_t left = reference.memory.parameters - got.memory.parameters;
      const int64_t units = 2;  // TinyTransformerOptions' layers
      EXPECT_GT(left, 0) << label;
      EXPECT_GE(got.memory.on_nvme, left) << label;
      if (offload == param) EXPECT_LT(got.memory.on_nvme, left + units * 4096) << label;
    }
  }
  // Built under zero::Init with the parameters on NVMe, each unit's shard goes to a file as soon
  // as the unit is built (none is held in memory) and reaches the engine's swap from there.
  // Encrypted, every one of those files (the units' spill, the parameters' and the optimizer's
  // swap) is sealed when written and opened when read: the same bits.
  for (bool bf16 : {false, true}) {
    const UnitRun reference = train("", bf16);
    for (bool encrypt_swap : {false, true}) {
      const UnitRun got = train(optimizer_nvme + param, bf16, {.init = true, .encrypt_swap = encrypt_swap});
      const std::string label = std::string(bf16 ? "bf16" : "fp32") + (encrypt_swap ? ", encrypted" : "");
      EXPECT_EQ(got.spilled_units, 2) << label;
      for (size_t i = 0; i < got.losses.size(); ++i)
        EXPECT_EQ(got.losses[i], reference.losses[i]) << "init, " << label << ", step " << i;
      for (size_t i = 0; i < got.weights.size(); ++i)
        EXPECT_TRUE(got.weights[i].equal(reference.weights[i])) << "init, " << label;
    }
  }
  // A checkpoint written with both on NVMe (streamed out of the swap files) resumes in memory,
  // and one written in memory resumes with both on NVMe: the same last 6 losses.
  const std::string both = optimizer_nvme + param;
  const std::string ckpt = (dir / "ckpt").string(), ckpt2 = (dir / "ckpt2").string();
  const UnitRun straight = train(both, false, {.save = ckpt, .save_at = 6});
  const UnitRun resumed = train("", false, {.load = ckpt, .first = 6});
  const UnitRun straight_memory = train("", false, {.save = ckpt2, .save_at = 6});
  const UnitRun resumed_nvme = train(both, false, {.load = ckpt2, .first = 6});
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(resumed.losses[i], straight.losses[6 + i]) << "nvme -> memory, step " << 6 + i;
    EXPECT_EQ(resumed_nvme.losses[i], straight_memory.losses[6 + i]) << "memory -> nvme, step " << 6 + i;
  }
  test_world().communicator().barrier({.async = false});
  int leftovers = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    leftovers += e.path().filename().string().rfind("zerocpp-swap-", 0) == 0;
  EXPECT_EQ(leftovers, 0) << "a swap folder outlived its engine";
  test_world().communicator().barrier({.async = false});
  if (test_world().rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
