// ZeRO-Offload to the CPU (offload_optimizer at stages 1-3, offload_param at stage 3) on a CPU
// build: the master, the optimizer state, the gradients and the parameter shards are in host
// memory whether offloaded or not, so an offloaded run must be the run without offload, bit for
// bit — losses and weights — at every stage, with and without overlap, in fp32 and bf16.
// NVMe (ZeRO-Infinity) is refused by name until it is built.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist_test_world.h"
#include "engine_test_util.h"
#include "zero/error.h"

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

TEST(OffloadNvme, IsRefusedByNameUntilItIsBuilt) {
  for (const char* block : {R"("offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"})",
                            R"("offload_param": {"device": "nvme", "nvme_path": "/tmp"})"}) {
    zero::Config config = zero::Config::parse(std::string(R"({"train_batch_size": 48, "zero_optimization": {"stage": 3, )") +
                                              block + R"(}, "optimizer": {"type": "AdamW"}})");
    config.resolve({.world_size = test_world().size()});
    engine_test::Mlp model;
    try {
      zero::Engine engine(model, config, test_world());
      FAIL() << block;
    } catch (const zero::Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("device \"nvme\" (ZeRO-Infinity) is not supported"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string(block).substr(1, 13)), std::string::npos) << what;  // names the key
    }
  }
}

}  // namespace
