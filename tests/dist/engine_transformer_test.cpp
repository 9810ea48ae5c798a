// The small transformer (attention, LayerNorm, tied embeddings; blocks are stage-3 units) under
// every stage, at 1-4 ranks,
// against one process at stage 0.
#include <gtest/gtest.h>

#include "dist_test_world.h"
#include "models/tiny/tiny_transformer.h"
#include "zero/engine.h"

namespace {

using zero::models::TinyTransformer;

struct TransformerRun {
  std::vector<double> losses;
  std::vector<at::Tensor> weights;
};

struct RunOptions {
  int64_t persistence = 0;  // stage3_param_persistence_threshold
  bool bf16 = false;
  double clipping = 1.0;
};

TransformerRun train(int stage, int accumulation, zero::World& world, const RunOptions& options = {}) {
  zero::models::TinyTransformerOptions o;
  torch::manual_seed(11);
  auto model = std::make_shared<TinyTransformer>(o);
  const std::string json = R"({"train_batch_size": 24, "gradient_accumulation_steps": )" +
                           std::to_string(accumulation) + R"(, "gradient_clipping": )" +
                           std::to_string(options.clipping) + R"(, "bf16": {"enabled": )" +
                           (options.bf16 ? "true" : "false") + R"(},
      "zero_optimization": {"stage": )" +
                           std::to_string(stage) +
                           R"(, "reduce_bucket_size": 3000, "overlap_comm": true,
                            "stage3_param_persistence_threshold": )" +
                           std::to_string(options.persistence) + R"(},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}},
      "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0.0005, "warmup_max_lr": 0.003,
                    "warmup_num_steps": 4, "total_num_steps": 20, "warmup_type": "linear"}}})";
  zero::Config config = zero::Config::parse(json);
  config.resolve({.world_size = world.size()});
  zero::Engine engine(*model, config, world);
  const int64_t micro = config.train_micro_batch_size_per_gpu;
  TransformerRun run;
  for (int step = 0; step < 20; ++step) {
    auto [tokens, targets] = zero::models::tiny_batch(24, o, 500 + step);
    double sum = 0;
    for (int64_t m = 0; m < accumulation; ++m) {
      const int64_t first = (m * world.size() + world.rank()) * micro;
      at::Tensor loss =
          engine.forward([&] { return model->loss(tokens.narrow(0, first, micro), targets.narrow(0, first, micro)); });
      engine.backward(loss);
      engine.step();
      sum += loss.item<double>();
    }
    at::Tensor mean = torch::full({1}, sum / accumulation, torch::kDouble);
    world.communicator().all_reduce(mean, zero::ReduceOp::kAvg, {.async = false});
    run.losses.push_back(mean.item<double>());
  }
  engine.gather_parameters();  // stage 3 holds only shards between steps
  for (const auto& p : model->parameters()) run.weights.push_back(p.detach().to(torch::kFloat).clone());
  return run;
}

}  // namespace

TEST(EngineTransformer, EveryStageMatchesOneProcess) {
  zero::World single = zero::World::single_process();
  const TransformerRun ref = train(0, 1, single);
  EXPECT_LT(ref.losses.back(), 0.9 * ref.losses.front());  // it learns
  // Stage 3 twice: every parameter sharded, and with the small ones (<= 128 elements) kept whole.
  for (auto [stage, persistence] : {std::pair{1, 0}, {2, 0}, {3, 0}, {3, 128}}) {
    for (int accumulation : {1, 2}) {
      TransformerRun got = train(stage, accumulation, test_world(), {.persistence = persistence});
      for (size_t i = 0; i < ref.losses.size(); ++i) {
        EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-5 * ref.losses[i])
            << "stage " << stage << " persistence " << persistence << " gas " << accumulation << " step " << i;
      }
      for (size_t i = 0; i < ref.weights.size(); ++i) {
        const double scale = ref.weights[i].abs().max().item<double>();
        EXPECT_LE((got.weights[i] - ref.weights[i]).abs().max().item<double>(), 1e-5 * scale)
            << "stage " << stage << " persistence " << persistence << " gas " << accumulation << " weight " << i;
      }
    }
  }
}

TEST(EngineTransformer, Bf16Stage3IsStage2AtTheSameRankCount) {
  // Same reductions element by element (a bucket per unit instead of per 3000 elements changes no
  // sum), same elementwise optimizer: without clipping (whose norm is summed shard by shard) the
  // runs agree to the last bit.
  const RunOptions bf16{.persistence = 0, .bf16 = true, .clipping = 0};
  const TransformerRun stage2 = train(2, 2, test_world(), bf16), stage3 = train(3, 2, test_world(), bf16);
  EXPECT_LT(stage2.losses.back(), 0.9 * stage2.losses.front());
  EXPECT_EQ(stage3.losses, stage2.losses);
  for (size_t i = 0; i < stage2.weights.size(); ++i) EXPECT_TRUE(stage3.weights[i].equal(stage2.weights[i])) << i;
}
