// The GPT trainer end to end through llm.c files: a tiny random checkpoint and token shard are
// written, trained 20 steps at stage 0 on one process (the step-0 loss checked against an
// independent computation from the file), and stages 1, 2 and 3 on every rank of this job must follow
// the same 20 losses (the issue asks 10; stage 3 asks 20). Also: --export then --init gives the identical next-step
// loss.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include "models/gpt/token_data.h"
#include "models/common/trainer.h"
#include "tests/dist/dist_test_world.h"
#include "tests/gpt_reference.h"
#include "zero/world.h"

using namespace zero::gpt;

namespace {

const GptShape kShape{.max_seq = 16, .vocab = 50, .layers = 2, .heads = 2, .channels = 16, .padded_vocab = 64};
constexpr int64_t kRows = 12;  // global batch: splits over 1, 2, 3 and 4 ranks

// A directory of the job (named after rank 0's pid) with a subdirectory per rank holding the same
// random model and tokens on every rank.
struct Files {
  std::filesystem::path root, dir, model, tokens, tail;
  std::vector<float> params;
  Files() {
    at::Tensor pid = torch::full({1}, static_cast<int64_t>(getpid()), torch::kLong);
    test_world().communicator().broadcast(pid, 0, {.async = false});
    root = std::filesystem::temp_directory_path() / ("zero_gpt_trainer_test." + std::to_string(pid.item<int64_t>()));
    dir = root / ("rank" + std::to_string(test_world().rank()));
    std::filesystem::create_directories(dir);
    model = dir / "model.bin";
    tokens = dir / "train_000.bin";
    tail = dir / "tail_000.bin";
    torch::manual_seed(21);
    at::Tensor p = torch::randn({checkpoint_numel(kShape)}) * 0.1;
    params.assign(p.data_ptr<float>(), p.data_ptr<float>() + p.numel());
    write_llmc_checkpoint(model.string(), kShape, params);
    // A learnable stream (each token mostly 3 × the previous + 1, mod V) so the loss can fall.
    at::Tensor noise = torch::randint(kShape.vocab, {40 * kRows * kShape.max_seq}, torch::kLong);
    at::Tensor keep = torch::rand({noise.numel()}) < 0.8;
    std::vector<uint16_t> ids(static_cast<size_t>(noise.numel()));
    for (int64_t i = 1; i < noise.numel(); ++i) {
      ids[static_cast<size_t>(i)] =
          keep[i].item<bool>() ? static_cast<uint16_t>((ids[static_cast<size_t>(i - 1)] * 3 + 1) % kShape.vocab)
                               : static_cast<uint16_t>(noise[i].item<int64_t>());
    }
    write_token_shard(tokens.string(), ids);
    // The same stream from batch 5 on: batch 0 of `tail` is batch 5 of `tokens`.
    write_token_shard(tail.string(), std::vector<uint16_t>(ids.begin() + 5 * kRows * kShape.max_seq, ids.end()));
  }
  ~Files() {
    test_world().communicator().barrier({.async = false});
    if (test_world().rank() == 0) std::filesystem::remove_all(root);
  }
};

std::string config(int stage) {
  return R"({"train_batch_size": 12, "gradient_clipping": 1.0,
             "zero_optimization": {"stage": )" +
         std::to_string(stage) + R"(, "reduce_bucket_size": 3000, "stage3_param_persistence_threshold": 0},
             "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}}})";
}

TrainerOptions options(const Files& f, int stage, int64_t steps) {
  TrainerOptions o;
  o.config_text = config(stage);
  o.init = f.model.string();
  o.train_data = f.tokens.string();
  o.steps = steps;
  return o;
}

std::vector<double> losses(const TrainerResult& r) {
  std::vector<double> out;
  for (const auto& s : r.steps) out.push_back(s.loss);
  return out;
}

}  // namespace

TEST(GptTrainer, StagesAndRankCountsFollowTheOneProcessTrajectory) {
  Files f;
  zero::World single = zero::World::single_process();
  const std::vector<double> reference = losses(train_model(options(f, 0, 20), single, nullptr));
  ASSERT_EQ(reference.size(), 20u);

  const Batch first = TokenData::from_shards(f.tokens.string(), kShape.vocab).batch(0, kRows, kShape.max_seq);
  auto tensor = [](const std::vector<int32_t>& v) {
    return torch::tensor(v, torch::kInt).to(torch::kLong).view({kRows, kShape.max_seq});
  };
  const double by_hand = by_hand::reference_loss(f.params, kShape, tensor(first.inputs), tensor(first.targets));
  EXPECT_NEAR(reference[0], by_hand, 1e-6 * by_hand);
  EXPECT_LT(reference[19], reference[0] - 0.05) << "the loss must fall";

  for (int stage : {1, 2, 3}) {
    const std::vector<double> got = losses(train_model(options(f, stage, 20), test_world(), nullptr));
    ASSERT_EQ(got.size(), reference.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], reference[i], 1e-5 * reference[i]) << "stage " << stage << ", step " << i + 1;
  }
}

TEST(GptTrainer, ExportThenInitGivesTheIdenticalNextStepLoss) {
  Files f;
  TrainerOptions six = options(f, 3, 6);
  const std::vector<double> straight = losses(train_model(six, test_world(), nullptr));

  TrainerOptions five = options(f, 3, 5);  // stage 3: the export gathers the units first
  five.export_path = (f.root / "exported.bin").string();
  train_model(five, test_world(), nullptr);
  test_world().communicator().barrier({.async = false});  // rank 0 writes the file every rank reads

  // From the export, on the stream from batch 5 on.
  TrainerOptions next = options(f, 3, 1);
  next.init = five.export_path;
  next.train_data = f.tail.string();
  const std::vector<double> resumed = losses(train_model(next, test_world(), nullptr));
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0], straight[5]);  // bitwise: the same fp32 weights and the same batch
}

TEST(GptTrainer, Fp16TrainsWithTheLossScalerAtWork) {
  // Issue 13: fp16 aborted ("LayerNormKernelImpl" not implemented for 'Half'). fp16 weights,
  // gradients and reductions, fp32 compute on the CPU (models/gpt/gpt.cpp); a loss scale of 2^24
  // overflows the fp16 gradients at first, so the scaler must skip steps and halve it.
  Files f;
  auto fp16 = [&](int stage) {
    TrainerOptions o = options(f, stage, 30);
    o.config_text.insert(
        o.config_text.size() - 1,
        R"(, "fp16": {"enabled": true, "initial_scale_power": 24, "hysteresis": 1, "loss_scale_window": 1000})");
    return train_model(o, test_world(), nullptr);
  };
  zero::World single = zero::World::single_process();
  const std::vector<double> fp32 = losses(train_model(options(f, 0, 1), single, nullptr));
  std::vector<double> stage0;
  for (int stage : {0, 2, 3}) {
    const TrainerResult r = fp16(stage);
    ASSERT_EQ(r.steps.size(), 30u);
    // The scale after each step: step 1 overflowed (2^24 → 2^23), and the scaler kept halving.
    EXPECT_EQ(r.steps.front().loss_scale, 8388608.0) << "stage " << stage;
    EXPECT_LE(r.steps.back().loss_scale, 131072.0) << "the scaler backed off too little, stage " << stage;
    for (const auto& s : r.steps) ASSERT_TRUE(std::isfinite(s.loss)) << "stage " << stage << " step " << s.step;
    EXPECT_NEAR(r.steps.front().loss, fp32[0], 1e-3 * fp32[0]) << "step 1 sees fp16-rounded fp32 weights";
    EXPECT_LT(r.steps.back().loss, r.steps.front().loss - 0.05) << "the loss must fall, stage " << stage;
    const std::vector<double> got = losses(r);
    if (stage == 0) {
      stage0 = got;
      continue;
    }
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], stage0[i], 1e-3 * stage0[i]) << "stage " << stage << ", step " << i + 1;
  }
}
