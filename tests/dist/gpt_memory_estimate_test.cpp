// zero-estimate's engine figures (zero::estimate::engine_model_states) equal what the engine
// measures (Engine::memory_report()) for a real GPT after two steps, at every stage, fp32 and
// bf16, at 1-4 ranks: parameters (stage 3: without its spare gather buffers, which follow the
// gathers), gradients, fp32 master, optimizer state, padding.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist_test_world.h"
#include "models/gpt/gpt.h"
#include "zero/engine.h"
#include "zero/estimate.h"

TEST(GptMemoryEstimate, EngineStatesEqualTheMemoryReport) {
  const int n = test_world().size();
  const zero::gpt::GptShape shape{.max_seq = 32, .vocab = 256, .layers = 3, .heads = 2, .channels = 64, .padded_vocab = 256};
  for (bool bf16 : {false, true}) {
    for (int stage : {0, 1, 2, 3}) {
      torch::manual_seed(3);
      zero::gpt::Gpt model(shape);
      zero::Config config = zero::Config::parse(R"({"train_batch_size": 12, "bf16": {"enabled": )" +
                                                std::string(bf16 ? "true" : "false") + R"(},
          "zero_optimization": {"stage": )" + std::to_string(stage) + R"(, "reduce_bucket_size": 30000,
            "stage3_param_persistence_threshold": 0},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})");
      config.resolve({.world_size = n});
      zero::Engine engine(model, config, test_world());
      // The estimator's input, from the module itself: sizes in the engine's order, blocks as units.
      zero::estimate::EngineLayoutInput in{.stage = stage, .world_size = n, .dtype_bytes = bf16 ? 2 : 4,
                                           .reduce_bucket_size = 30000};
      for (const auto& item : model.named_parameters()) {
        in.numels.push_back(item.value().numel());
        const std::string& name = item.key();
        in.units.push_back(name[0] == 'h' && name.find('.') != std::string::npos ? std::stoi(name.substr(1)) : -1);
      }
      const zero::estimate::EngineStates expected = zero::estimate::engine_model_states(in);
      const int64_t rows = config.train_micro_batch_size_per_gpu;
      for (int step = 0; step < 2; ++step) {
        torch::manual_seed(10 + step);
        const at::Tensor tokens = torch::randint(0, shape.vocab, {rows, 16}, torch::kLong);
        at::Tensor loss = engine.forward([&] { return model.loss(tokens, tokens.roll(1, 1)); });
        engine.backward(loss);
        engine.step();
      }
      const zero::MemoryReport r = engine.memory_report();
      const std::string what = "stage " + std::to_string(stage) + (bf16 ? " bf16" : " fp32") + ", " +
                               std::to_string(n) + " ranks";
      EXPECT_EQ(r.parameters - r.gather_buffers, expected.parameters) << what;
      EXPECT_EQ(r.gradients, expected.gradients) << what;
      EXPECT_EQ(r.master_weights, expected.master_weights) << what;
      EXPECT_EQ(r.optimizer_state, expected.optimizer_state) << what;
      EXPECT_EQ(r.padding_elements, expected.padding_elements) << what;
      if (stage == 3 && n > 1) EXPECT_LE(r.gather_buffers, 2 * expected.largest_unit_bytes) << what;
    }
  }
}
