// ZeRO-Offload to the CPU (offload_optimizer at stages 1-3, offload_param at stage 3) on a CPU
// build: the master, the optimizer state, the gradients and the parameter shards are in host
// memory whether offloaded or not, so an offloaded run must be the run without offload, bit for
// bit — losses and weights — at every stage, with and without overlap, in fp32 and bf16.
// The optimizer on NVMe (ZeRO-Infinity) streams master and moments through a pool of buffers,
// tile by tile, with the same arithmetic: bit for bit too, and only the pool stays in memory.
// Stage 3's parameter shards on NVMe are read for each gather and written by each step: the same
// bits again, and with the swap encrypted (encrypt_swap). Bad swap paths and Lamb (its trust ratios need every tile twice) are errors by name.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist_test_world.h"
#include "engine_test_util.h"
#include "zero/error.h"

#include <unistd.h>

#include <filesystem>

using engine_test::kSteps;
using engine_test::Trajectory;

namespace {

// config_json's run with the offload blocks added (and bf16 when asked).
std::string offloaded(std::string json, bool optimizer, bool param, bool bf16 = false) {
  std::string blocks;
  if (optimizer) blocks += R"(, "offload_optimizer": {"device": "cpu", "pin_memory": true})";
  if (param) blocks += R"(, "offload_param": {"device": "cpu", "pin_memory": true})";
  const std::string anchor = R"("reduce_bucket_size": 100)";
  json.replace(json.find(anchor), anchor.size(), anchor + blocks);
  if (bf16) json.insert(1, R"("bf16": {"enabled": true}, )");
  return json;
}

void expect_same(const Trajectory& a, const Trajectory& b, const std::string& label) {
  ASSERT_EQ(a.losses.size(), static_cast<size_t>(kSteps)) << label;
  for (int i = 0; i < kSteps; ++i) EXPECT_EQ(a.losses[i], b.losses[i]) << label << " step " << i;
  ASSERT_EQ(a.weights.size(), b.weights.size()) << label;
  for (size_t i = 0; i < a.weights.size(); ++i) EXPECT_TRUE(a.weights[i].equal(b.weights[i])) << label << " weight " << i;
}

TEST(OffloadCpu, EveryModeIsTheInMemoryRunBitForBit) {
  for (int stage = 1; stage <= 3; ++stage)
    for (bool overlap : {false, true})
      for (bool bf16 : {false, true}) {
        const std::string plain = offloaded(engine_test::config_json(stage, 2, overlap), false, false, bf16);
        const Trajectory reference = engine_test::train(plain, test_world());
        for (bool param : {false, true}) {
          if (param && stage != 3) continue;
          const std::string label = "stage " + std::to_string(stage) + (overlap ? " overlap" : "") +
                                    (bf16 ? " bf16" : " fp32") + (param ? " optimizer+param" : " optimizer");
          expect_same(engine_test::train(offloaded(engine_test::config_json(stage, 2, overlap), true, param, bf16),
                                         test_world()),
                      reference, label);
        }
      }
}

TEST(OffloadCpu, TheTrajectoryLearns) {
  // Bitwise equality with a run that learns nothing would prove nothing.
  const Trajectory t = engine_test::train(offloaded(engine_test::config_json(3, 1, true), true, true), test_world());
  EXPECT_LT(t.losses.back(), 0.8 * t.losses.front());
}

// A directory every rank of the job sees, removed at the end.
struct SwapDir {
  std::filesystem::path path;
  SwapDir() {
    at::Tensor pid = torch::full({1}, static_cast<int64_t>(getpid()), torch::kLong);
    test_world().communicator().broadcast(pid, 0, {.async = false});
    path = std::filesystem::temp_directory_path() / ("zero_nvme_test." + std::to_string(pid.item<int64_t>()));
    std::filesystem::create_directories(path);
  }
  ~SwapDir() {
    test_world().communicator().barrier({.async = false});
    if (test_world().rank() == 0) std::filesystem::remove_all(path);
  }
  // Swap folders left in it (each rank's is removed when its engine goes), once every rank is here.
  int leftovers() const {
    test_world().communicator().barrier({.async = false});
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(path)) n += e.path().filename().string().rfind("zerocpp-swap-", 0) == 0;
    return n;
  }
};

std::string with_tiles(std::string json, int64_t sub_group) {
  const std::string anchor = R"("reduce_bucket_size": 100)";
  json.replace(json.find(anchor), anchor.size(), anchor + R"(, "sub_group_size": )" + std::to_string(sub_group));
  return json;
}

std::string on_nvme(std::string json, const std::string& dir, bool pipeline, int64_t buffers = 4) {
  const std::string anchor = R"("reduce_bucket_size": 100)";
  json.replace(json.find(anchor), anchor.size(),
               anchor + R"(, "offload_optimizer": {"device": "nvme", "nvme_path": ")" + dir + R"(", "buffer_count": )" +
                   std::to_string(buffers) + R"(, "pipeline_read": )" + (pipeline ? "true" : "false") +
                   R"(, "pipeline_write": )" + (pipeline ? "true" : "false") + "}");
  return json;
}

std::string param_on_nvme(std::string json, const std::string& dir) {
  const std::string anchor = R"("reduce_bucket_size": 100)";
  json.replace(json.find(anchor), anchor.size(),
               anchor + R"(, "offload_param": {"device": "nvme", "nvme_path": ")" + dir + R"("})");
  return json;
}

// The same run with every swap file encrypted ("zerocpp": {"encrypt_swap": true}).
std::string encrypted(const std::string& json) { return R"({"zerocpp": {"encrypt_swap": true}, )" + json.substr(1); }

TEST(OffloadNvme, TheOptimizerOnNvmeIsTheInMemoryRunBitForBit) {
  SwapDir dir;
  for (int stage = 1; stage <= 3; ++stage)
    for (bool bf16 : {false, true}) {
      // Tiles of 96 elements: a rank's partition streams through the buffers in several tiles.
      const std::string plain = offloaded(with_tiles(engine_test::config_json(stage, 2, true), 96), false, false, bf16);
      const Trajectory reference = engine_test::train(plain, test_world());
      for (bool pipeline : {false, true})
        for (int64_t buffers : {int64_t{1}, int64_t{4}}) {
          const std::string label = "stage " + std::to_string(stage) + (bf16 ? " bf16" : " fp32") +
                                    (pipeline ? " pipelined" : "") + " buffers " + std::to_string(buffers);
          expect_same(engine_test::train(on_nvme(plain, dir.path.string(), pipeline, buffers), test_world()), reference,
                      label);
        }
      // Encrypted: the tiles read and written back, and at stage 2 the gradients streamed into
      // the file during backward, each sealed and authenticated.
      if (stage == 2)
        expect_same(engine_test::train(encrypted(on_nvme(plain, dir.path.string(), true)), test_world()), reference,
                    "stage 2 encrypted" + std::string(bf16 ? " bf16" : " fp32"));
      // Stage 3: the parameters offloaded too, to the CPU or to NVMe; or only they on NVMe.
      if (stage == 3) {
        expect_same(engine_test::train(offloaded(on_nvme(plain, dir.path.string(), true), false, true, false),
                                       test_world()),
                    reference, "stage 3 optimizer nvme + param cpu");
        expect_same(engine_test::train(param_on_nvme(on_nvme(plain, dir.path.string(), true), dir.path.string()),
                                       test_world()),
                    reference, "stage 3 optimizer nvme + param nvme");
        expect_same(engine_test::train(param_on_nvme(plain, dir.path.string()), test_world()), reference,
                    "stage 3 param nvme");
      }
    }
  EXPECT_EQ(dir.leftovers(), 0);
}

TEST(OffloadNvme, WhatStaysInMemoryIsThePool) {
  SwapDir dir;
  const int64_t sub_group = 96, buffers = 3;
  for (int stage : {1, 2}) {
    const std::string json =
        on_nvme(with_tiles(engine_test::config_json(stage, 1, false), sub_group), dir.path.string(), true, buffers);
    engine_test::OneStep s = engine_test::one_step(json, test_world());
    const zero::MemoryReport r = s.engine->memory_report();
    // Computed here from the layout: tiles of 96 elements of this rank's owned buffer; a tile's
    // region is its master and Adam's two moments, and at stage 2 its gradients, each padded to
    // 4096 bytes. Stage 2 streams the gradients into the file through two chunks and a bounce
    // buffer of one tile's segment each (4096 bytes here); stage 1 keeps them in its buckets.
    const int64_t owned = engine_test::mlp_layout(test_world().size()).owned_numel();
    const int segments = stage == 2 ? 4 : 3;
    auto region = [&](int64_t elements) { return segments * ((elements * 4 + 4095) / 4096 * 4096); };
    int64_t file = 0, tiles = 0;
    for (int64_t o = 0; o < owned; o += sub_group, ++tiles) file += region(std::min(sub_group, owned - o));
    const std::string label = "stage " + std::to_string(stage);
    EXPECT_EQ(r.master_weights, 0) << label;
    EXPECT_EQ(r.optimizer_state, 0) << label;
    if (stage == 2) EXPECT_EQ(r.gradients, 0) << label;
    EXPECT_EQ(r.swap_buffers, std::min(buffers, tiles) * region(std::min(sub_group, owned)) + (stage == 2 ? 3 * 4096 : 0))
        << label;
    EXPECT_EQ(r.on_nvme, file) << label;
    s.engine.reset();
    EXPECT_EQ(dir.leftovers(), 0) << "the swap folder outlived the engine";
  }
}

TEST(OffloadNvme, BadPathsAndLambAreErrorsByName) {
  SwapDir dir;
  const std::string nvme = dir.path.string();
  auto error_of = [&](const std::string& json) -> std::string {
    engine_test::Mlp model;
    try {
      zero::Config config = zero::Config::parse(json);
      config.resolve({.world_size = test_world().size()});
      zero::Engine engine(model, config, test_world());
    } catch (const zero::Error& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string base = engine_test::config_json(3, 1, false);
  std::string param = base;
  param.replace(param.find(R"("reduce_bucket_size": 100)"), 25,
                R"("reduce_bucket_size": 100, "offload_param": {"device": "nvme", "nvme_path": ")" + nvme + R"(/gone"})");
  EXPECT_NE(error_of(param).find("zero_optimization.offload_param.nvme_path: " + nvme + "/gone does not exist"),
            std::string::npos);
  std::string lamb = on_nvme(base, nvme, false);
  lamb.replace(lamb.find("AdamW"), 5, "Lamb");
  // DeepSpeed's rule (zero_force_ds_cpu_optimizer) refuses it first; FlatOptimizer would too.
  EXPECT_NE(error_of(lamb).find("\"Lamb\" has no CPU implementation for optimizer offload"), std::string::npos);
  const std::string missing = on_nvme(base, nvme + "/nowhere", false);
  EXPECT_NE(error_of(missing).find("zero_optimization.offload_optimizer.nvme_path: " + nvme + "/nowhere does not exist"),
            std::string::npos);
  EXPECT_EQ(dir.leftovers(), 0);
}

TEST(OffloadNvme, AioAndPoolKeysWithoutEffectAreNamed) {
  SwapDir dir;
  std::string json = param_on_nvme(on_nvme(engine_test::config_json(3, 1, false), dir.path.string(), true),
                                   dir.path.string());
  json.replace(json.find(R"("nvme_path": ")" + dir.path.string() + R"("})"), 0, R"("buffer_size": 1000, )");
  json.insert(1, R"("aio": {"intra_op_parallelism": 2, "overlap_events": false}, )");
  engine_test::Mlp model;
  zero::Config config = zero::Config::parse(json);
  config.resolve({.world_size = test_world().size()});
  zero::Engine engine(model, config, test_world());
  std::string all;
  for (const auto& w : engine.warnings()) all += w + "\n";
  for (const char* key : {"aio.intra_op_parallelism", "aio.overlap_events", "offload_param.buffer_count/buffer_size"})
    EXPECT_NE(all.find(key), std::string::npos) << key << " in:\n" << all;
}

}  // namespace
