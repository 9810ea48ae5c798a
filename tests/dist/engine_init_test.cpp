// zero::Init (partitioned construction): a model built inside the scope never exists whole on a
// rank, yet has exactly the single-process weights and trains exactly as one built whole; ranks
// that built different values, or an engine that does not match the scope, are errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dist_test_world.h"
#include "models/tiny/tiny_transformer.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/init.h"
#include "zero/memory_tracker.h"

namespace {

using zero::models::TinyTransformer;

const zero::models::TinyTransformerOptions kOptions{.vocab = 64, .channels = 32, .heads = 4, .layers = 4, .max_seq = 16};

zero::Config config_for(int64_t persistence, bool bf16 = false, int stage = 3) {
  zero::Config config = zero::Config::parse(R"({"train_batch_size": 24, "bf16": {"enabled": )" +
                                            std::string(bf16 ? "true" : "false") + R"(},
      "zero_optimization": {"stage": )" + std::to_string(stage) +
                                            R"(, "stage3_param_persistence_threshold": )" +
                                            std::to_string(persistence) + R"(},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}})");
  config.resolve({.world_size = test_world().size()});
  return config;
}

std::shared_ptr<TinyTransformer> build(const zero::Config* init_config, uint64_t seed = 11) {
  std::optional<zero::Init> init;
  if (init_config != nullptr) init.emplace(*init_config, test_world());
  torch::manual_seed(seed);
  return std::make_shared<TinyTransformer>(kOptions);
}

at::Tensor all_weights(TinyTransformer& model) {
  std::vector<at::Tensor> flat;
  for (const auto& p : model.parameters()) flat.push_back(p.detach().to(at::kFloat).reshape(-1));
  return at::cat(flat);
}

std::vector<float> train(TinyTransformer& model, zero::Engine& engine, int steps) {
  auto [tokens, targets] = zero::models::tiny_batch(24, kOptions, 1);
  const int64_t micro = engine.config().train_micro_batch_size_per_gpu, first = test_world().rank() * micro;
  std::vector<float> losses;
  for (int step = 0; step < steps; ++step) {
    at::Tensor loss =
        engine.forward([&] { return model.loss(tokens.narrow(0, first, micro), targets.narrow(0, first, micro)); });
    losses.push_back(loss.item<float>());
    engine.backward(loss);
    engine.step();
  }
  return losses;
}

}  // namespace

TEST(EngineInit, BuildsTheSingleProcessWeightsAndTrainsAsAWholeBuild) {
  const at::Tensor single = all_weights(*build(nullptr));  // one process, no engine
  for (int64_t persistence : {0, 64}) {
    for (bool bf16 : {false, true}) {
      const std::string label = "persistence " + std::to_string(persistence) + (bf16 ? ", bf16" : ", fp32");
      const zero::Config config = config_for(persistence, bf16);
      auto partitioned = build(&config);
      for (const auto& block : partitioned->blocks) {
        for (const auto& p : block->parameters()) {
          if (p.numel() > persistence) EXPECT_EQ(p.storage().nbytes(), 0u) << label << ": a unit was built whole";
          if (p.numel() <= persistence) EXPECT_GT(p.storage().nbytes(), 0u) << label << ": a small parameter was cut";
        }
      }
      zero::Engine engine(*partitioned, config, test_world());
      {
        auto whole = engine.gathered_parameters();
        const at::Tensor expected = bf16 ? single.to(at::kBFloat16).to(at::kFloat) : single;
        EXPECT_TRUE(all_weights(*partitioned).equal(expected)) << label << ": not the single-process weights";
      }
      auto reference_model = build(nullptr);
      zero::Engine reference(*reference_model, config, test_world());
      EXPECT_EQ(train(*partitioned, engine, 4), train(*reference_model, reference, 4)) << label;
      engine.gather_parameters();
      reference.gather_parameters();
      EXPECT_TRUE(all_weights(*partitioned).equal(all_weights(*reference_model))) << label;
    }
  }
}

TEST(EngineInit, BuildingPeaksAtOneUnitPlusTheShards) {
  zero::MemoryTracker& tracker = zero::MemoryTracker::install();
  const int n = test_world().size();
  const zero::Config config = config_for(0);
  auto peak_of_building = [&](const zero::Config* init_config) {
    tracker.reset_peak();
    const int64_t before = tracker.current();
    auto model = build(init_config);
    return tracker.peak() - before;
  };
  const int64_t whole = peak_of_building(nullptr), partitioned = peak_of_building(&config);
  // fp32; outside the units: wte, wpe, lnf; a unit's bucket is padded to n × 8 elements.
  const auto& o = kOptions;
  const int64_t root = 4 * (o.vocab * o.channels + o.max_seq * o.channels + 2 * o.channels);
  auto probe = std::make_shared<TinyTransformer>(o);
  int64_t unit = 0;
  for (const auto& p : probe->blocks[0]->parameters()) unit += 4 * p.numel();
  const int64_t padded_unit = (unit / 4 + 8 * n - 1) / (8 * n) * (8 * n) * 4;
  EXPECT_EQ(whole, root + o.layers * unit) << "building without Init holds the whole model";
  EXPECT_LE(partitioned, root + unit + o.layers * padded_unit / n) << "more than one unit plus the shards";
  EXPECT_GE(partitioned, unit);
  if (test_world().rank() == 0)
    std::printf("building: %lld bytes whole, %lld under zero::Init on %d ranks\n", (long long)whole,
                (long long)partitioned, n);
}

TEST(EngineInit, RanksThatBuiltDifferentValuesFailNamingTheUnitAndRank) {
  if (test_world().size() < 2) GTEST_SKIP() << "needs two ranks";
  const zero::Config config = config_for(0);
  auto model = build(&config, test_world().rank() == 1 ? 12 : 11);
  try {
    zero::Engine engine(*model, config, test_world());
    FAIL() << "accepted";
  } catch (const zero::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ranks built unit h0 with different values (rank 1 differs from rank 0)"), std::string::npos)
        << what;
  }
}

TEST(EngineInit, TheEngineMustMatchTheScope) {
  const zero::Config built = config_for(0);
  auto model = build(&built);
  auto error_of = [&](const zero::Config& config) {
    try {
      zero::Engine engine(*model, config, test_world());
    } catch (const zero::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string dtype = error_of(config_for(0, /*bf16=*/true));
  EXPECT_NE(dtype.find("unit h0 was built under zero::Init for " + std::to_string(test_world().size()) +
                       " ranks in Float, but the engine trains on " + std::to_string(test_world().size()) +
                       " in BFloat16"),
            std::string::npos)
      << dtype;
  const std::string stage = error_of(config_for(0, false, 2));
  EXPECT_NE(stage.find("built under zero::Init, which partitions it for stage 3, but the config says stage 2"),
            std::string::npos)
      << stage;
  // Parameters taken out of a unit after it was partitioned: the engine's bucket would differ.
  model->blocks[1]->block->unregister_module("fc");
  const std::string layout = error_of(built);
  EXPECT_NE(layout.find("another layout than the engine's"), std::string::npos) << layout;
  // Outside stage 3 the scope does nothing: the model is built whole.
  const zero::Config stage2 = config_for(0, false, 2);
  auto whole = build(&stage2);
  for (const auto& p : whole->parameters()) EXPECT_GT(p.storage().nbytes(), 0u);
}
