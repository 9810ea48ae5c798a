// Activation checkpointing through the engine: the small transformer with dropout, every block
// under checkpointing::checkpoint, trains to the same losses and weights, bit for bit, as without,
// at stages 0-3, in fp32 and bf16, with the optimizer and parameters offloaded (CPU and NVMe), at
// any rank count; at stage 3 a recomputed unit is gathered for its recomputation and kept for its
// backward, so a step gathers exactly as often as without checkpointing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tiny_step.h"
#include "zero/activation_checkpoint.h"
#include "zero/engine.h"

namespace {

// Enough steps for dropout masks, Adam's moments and the loss to move; each one compares bit for bit.
constexpr int kSteps = 8;

struct CkptRun {
  std::vector<double> losses;
  std::vector<at::Tensor> weights;
  int64_t all_gathers = 0;
  int64_t gathered_peak = 0;  // stage 3: most unit bytes whole at once
  zero::checkpointing::CheckpointCounts counts;
};

CkptRun train(int stage, bool bf16, int64_t checkpoint_every, const std::string& offload = "") {
  zero::models::TinyTransformerOptions o;
  o.layers = 3;
  o.dropout = 0.1;
  o.checkpoint_every = checkpoint_every;
  torch::manual_seed(11);
  auto model = std::make_shared<zero::models::TinyTransformer>(o);
  const std::string json = std::string(R"({"train_batch_size": 24, "gradient_clipping": 1.0, "bf16": {"enabled": )") +
                           (bf16 ? "true" : "false") + R"(},
      "zero_optimization": {"stage": )" + std::to_string(stage) + R"(, "overlap_comm": true, "reduce_bucket_size": 3000,
                            "stage3_param_persistence_threshold": 0)" + offload + R"(},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}}})";
  zero::Config config = zero::Config::parse(json);
  config.resolve({.world_size = test_world().size()});
  zero::Engine engine(*model, config, test_world());
  engine.train();
  const int64_t micro = config.train_micro_batch_size_per_gpu;
  CkptRun run;
  const auto before = zero::checkpointing::counts();
  // tiny_batch seeds the CPU generator each step: the dropout masks follow from it, with and
  // without checkpointing alike.
  for (int step = 0; step < kSteps; ++step) run.losses.push_back(tiny_step(engine, *model, micro, step));
  run.counts = zero::checkpointing::counts();
  run.counts.forwards -= before.forwards;
  run.counts.recomputations -= before.recomputations;
  run.all_gathers = engine.comm_stats().total(zero::CollectiveOp::kAllGather).calls;
  run.gathered_peak = engine.memory_report().gathered_peak;
  engine.gather_parameters();
  for (const auto& p : model->parameters()) run.weights.push_back(p.detach().to(torch::kFloat).clone());
  return run;
}

void expect_same(const CkptRun& got, const CkptRun& expected, const std::string& label) {
  ASSERT_EQ(got.losses.size(), expected.losses.size()) << label;
  for (size_t i = 0; i < got.losses.size(); ++i) EXPECT_EQ(got.losses[i], expected.losses[i]) << label << " step " << i;
  for (size_t i = 0; i < got.weights.size(); ++i) EXPECT_TRUE(got.weights[i].equal(expected.weights[i])) << label;
}

TEST(EngineActivationCheckpoint, EveryStageTrainsBitForBitAsWithout) {
  for (int stage = 0; stage <= 3; ++stage)
    for (bool bf16 : {false, true}) {
      const std::string label = "stage " + std::to_string(stage) + (bf16 ? " bf16" : " fp32");
      const CkptRun plain = train(stage, bf16, 0);
      EXPECT_LT(plain.losses.back(), plain.losses.front()) << label;
      const CkptRun every = train(stage, bf16, 1), alternate = train(stage, bf16, 2);
      expect_same(every, plain, label + ", every block");
      expect_same(alternate, plain, label + ", every 2nd block");
      EXPECT_EQ(every.counts.forwards, kSteps * 3) << label;
      EXPECT_EQ(every.counts.recomputations, kSteps * 3) << label;
      EXPECT_EQ(alternate.counts.recomputations, kSteps * 2) << label;  // blocks 0 and 2
      if (stage == 3) {
        EXPECT_EQ(every.all_gathers, plain.all_gathers) << label << ": recomputed units gathered twice";
        EXPECT_LE(every.gathered_peak, plain.gathered_peak) << label << ": more units whole at once";
      }
    }
}

TEST(EngineActivationCheckpoint, WithEveryOffloadMode) {
  at::Tensor pid = torch::full({1}, static_cast<int64_t>(getpid()), torch::kLong);
  test_world().communicator().broadcast(pid, 0, {.async = false});
  const auto dir = std::filesystem::temp_directory_path() / ("zero_ckpt_nvme." + std::to_string(pid.item<int64_t>()));
  std::filesystem::create_directories(dir);
  const std::string nvme = R"(, "offload_optimizer": {"device": "nvme", "nvme_path": ")" + dir.string() +
                           R"(", "pipeline_read": true}, "offload_param": {"device": "nvme", "nvme_path": ")" +
                           dir.string() + R"("})";
  const std::string cpu = R"(, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"})";
  const CkptRun plain = train(3, false, 0);
  for (const std::string& offload : {cpu, nvme}) expect_same(train(3, false, 1, offload), plain, offload);
  test_world().communicator().barrier({.async = false});
  if (test_world().rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace

// Partitioned over the world (every rank holds the same inputs, as a tensor-parallel group does
// outside its split regions): each rank keeps its piece of each floating-point input — 15
// elements cut into pieces of ceil(15 / n), the last padded — and the all-gather before the
// recomputation puts them back. The gradients are the same bits as whole; an integer input stays
// whole; a later in-place change of the input no longer reaches the recomputation.
TEST(EngineActivationCheckpoint, PartitionedInputsComeBackWhole) {
  namespace ckpt = zero::checkpointing;
  auto block = [](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{(in[0].sin() * in[1]).index_select(1, in[2])};
  };
  auto gradients = [&](zero::Communicator* partition) {
    torch::manual_seed(3);  // the same on every rank
    const at::Tensor x = torch::randn({3, 5}, torch::requires_grad()), w = torch::randn({3, 5}, torch::requires_grad());
    const at::Tensor index = torch::tensor({4, 0, 2}, torch::kLong);
    const at::Tensor y = ckpt::checkpoint(block, {x * 1, w, index}, "partitioned", partition)[0];
    y.pow(2).sum().backward();
    return std::pair{x.grad(), w.grad()};
  };
  zero::Communicator& world = test_world().communicator();
  const int64_t gathers_before = zero::checkpointing::counts().recomputations;
  const auto [x_whole, w_whole] = gradients(nullptr);
  const auto [x_split, w_split] = gradients(&world);
  EXPECT_TRUE(x_whole.equal(x_split));
  EXPECT_TRUE(w_whole.equal(w_split));
  EXPECT_EQ(zero::checkpointing::counts().recomputations - gathers_before, 2);
  // Changed in place after the forward: whole, an error; partitioned, the forward's values come back.
  for (zero::Communicator* partition : {static_cast<zero::Communicator*>(nullptr), &world}) {
    at::Tensor x = torch::ones({4}, torch::requires_grad()), input = x * 2;
    const at::Tensor y = ckpt::checkpoint([](const at::Tensor& in) { return in.exp(); }, input, "changed", partition);
    input.detach().add_(1);
    if (partition && world.size() > 1) {
      y.sum().backward();
      EXPECT_TRUE(x.grad().allclose(2 * torch::full({4}, std::exp(2.0)))) << x.grad();
    } else {
      EXPECT_THROW(y.sum().backward(), std::exception);
    }
  }
}
