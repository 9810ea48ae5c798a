// ZeRO++ (docs/zeropp.md) in the engine, under mpirun -np 1..4 and across two "nodes"
// (ZERO_RANKS_PER_NODE=2, whose collectives are the hierarchical ones and count what crosses):
//   - hpZ alone changes where backward gathers come from, never a value: bit for bit the run
//     without it, with prefetches in flight and under activation checkpointing; its secondary
//     partition is in memory_report() exactly, and the backward gathers' bytes leave the network;
//   - qwZ and qgZ change values by their quantization only: close to the exact run, not equal,
//     and their bytes across nodes are exactly the int8 and int4 messages';
//   - a checkpoint saved with all three on holds the full-precision weights.
#include <gtest/gtest.h>

#include <filesystem>

#include "comm/quantize.h"
#include "dist_test_world.h"
#include "models/tiny/tiny_transformer.h"
#include "scratch_dir.h"
#include "zero/engine.h"
#include "zero/error.h"

namespace {

using zero::models::TinyTransformer;
using zero::comm_detail::quantized_bytes;

constexpr int kZeroppSteps = 3;

struct Setup {
  std::string zeropp;  // keys added to zero_optimization, e.g. R"("zero_quantized_weights": true)"
  int stage = 3;
  const char* optimizer = "AdamW";
  bool prefetch = true;  // false: stage3_max_live_parameters 0 (every gather on demand, nothing kept)
  int64_t checkpoint_every = 0;
};

zero::Config config_for(const Setup& s) {
  std::string zero = R"("stage": )" + std::to_string(s.stage) +
                     R"(, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0, "reduce_bucket_size": 3000)";
  if (!s.prefetch) zero += R"(, "stage3_max_live_parameters": 0)";
  if (!s.zeropp.empty()) zero += ", " + s.zeropp;
  zero::Config config = zero::Config::parse(R"({"train_batch_size": 24, "zero_allow_untested_optimizer": true, "zero_optimization": {)" + zero +
                                            R"(}, "optimizer": {"type": ")" + s.optimizer +
                                            R"(", "params": {"lr": 0.003}}})");
  config.resolve({.world_size = test_world().size()});
  return config;
}

struct Trained {
  std::vector<double> losses;
  std::vector<at::Tensor> weights;  // gathered exactly after the last step
  int64_t inter_node = 0;           // bytes this rank sent across nodes in the steps
  int64_t secondary_after_first_forward = -1;
  int64_t secondary_after_step = -1;
};

zero::models::TinyTransformerOptions model_options(const Setup& s) {
  zero::models::TinyTransformerOptions o;
  o.layers = 3;
  o.checkpoint_every = s.checkpoint_every;
  return o;
}

Trained train(const Setup& s, int steps = kZeroppSteps, const std::string& save_to = "") {
  const auto o = model_options(s);
  torch::manual_seed(11);
  auto model = std::make_shared<TinyTransformer>(o);
  zero::Config config = config_for(s);
  zero::Engine engine(*model, config, test_world());
  zero::Communicator& comm = test_world().communicator();
  const int64_t micro = config.train_micro_batch_size_per_gpu, first = test_world().rank() * micro;
  Trained run;
  for (int step = 0; step < steps; ++step) {
    auto [tokens, targets] = zero::models::tiny_batch(24, o, step);
    const int64_t before = comm.inter_node_bytes();
    at::Tensor loss =
        engine.forward([&] { return model->loss(tokens.narrow(0, first, micro), targets.narrow(0, first, micro)); });
    if (step == 0) run.secondary_after_first_forward = engine.memory_report().secondary_partition;
    engine.backward(loss);
    engine.step();
    run.inter_node += comm.inter_node_bytes() - before;
    run.secondary_after_step = engine.memory_report().secondary_partition;
    at::Tensor mean = loss.detach().to(at::kDouble).reshape({1});
    comm.all_reduce(mean, zero::ReduceOp::kAvg, {.async = false});
    run.losses.push_back(mean.item<double>());
  }
  {
    auto whole = engine.gathered_parameters();
    for (const auto& p : model->parameters()) run.weights.push_back(p.detach().clone());
  }
  if (!save_to.empty()) engine.save_checkpoint(save_to, "zeropp");
  return run;
}

bool same_weights(const Trained& a, const Trained& b) {
  if (a.weights.size() != b.weights.size()) return false;
  for (size_t i = 0; i < a.weights.size(); ++i) {
    if (!a.weights[i].equal(b.weights[i])) return false;
  }
  return true;
}

double largest_relative_loss_difference(const Trained& a, const Trained& b) {
  double worst = 0;
  for (size_t i = 0; i < a.losses.size(); ++i) worst = std::max(worst, std::abs(a.losses[i] / b.losses[i] - 1));
  return worst;
}

// Per block unit: c, its elements per rank (fp32 buckets padded to 8 × world size).
std::vector<int64_t> block_chunks() {
  const int n = test_world().size();
  torch::manual_seed(11);
  TinyTransformer model(model_options({}));
  std::vector<int64_t> chunks;
  for (const auto& block : model.blocks) {
    int64_t numel = 0;
    for (const auto& p : block->parameters()) numel += p.numel();
    chunks.push_back((numel + 8 * n - 1) / (8 * n) * 8);
  }
  return chunks;
}

// The ranks hpZ groups: a node's (with more than one rank per node and equal nodes), else none.
int hpz_size() {
  zero::World& w = test_world();
  const int local = w.local_size();
  return local > 1 && w.size() % local == 0 && w.size() / local == w.num_nodes() ? local : 0;
}

// Nodes on each side of this rank's crossings: H - 1 with equal nodes of two ranks or more.
int64_t other_nodes() { return test_world().num_nodes() > 1 && hpz_size() ? test_world().num_nodes() - 1 : 0; }

}  // namespace

TEST(EngineZeropp, HierarchicalPartitionsChangeNoValue) {
  const int hpz = hpz_size();
  if (hpz == 0) GTEST_SKIP() << "hpZ needs equal nodes of two ranks or more";
  const std::string key = R"("zero_hpz_partition_size": )" + std::to_string(hpz);
  for (bool prefetch : {true, false}) {
    for (int64_t checkpoint_every : {0, 1}) {
      SCOPED_TRACE(std::string(prefetch ? "prefetching" : "on demand") + (checkpoint_every ? ", checkpointed" : ""));
      const Trained exact = train({.prefetch = prefetch, .checkpoint_every = checkpoint_every});
      const Trained with_hpz = train({.zeropp = key, .prefetch = prefetch, .checkpoint_every = checkpoint_every});
      EXPECT_EQ(with_hpz.losses, exact.losses);
      EXPECT_TRUE(same_weights(with_hpz, exact));
      // The first forward records the order and keeps no unit: every block leaves its part.
      int64_t secondary = 0;
      for (int64_t c : block_chunks()) secondary += 4 * c * test_world().size() / hpz;
      EXPECT_EQ(with_hpz.secondary_after_first_forward, secondary);
      EXPECT_EQ(exact.secondary_after_first_forward, 0);
      EXPECT_EQ(with_hpz.secondary_after_step, 0) << "backward is over: the secondary partition goes";
      if (!prefetch && checkpoint_every == 0) {
        // Every block's backward gather stays within the node: (H-1)·c·4 bytes less per block and step.
        int64_t saved = 0;
        for (int64_t c : block_chunks()) saved += kZeroppSteps * other_nodes() * c * 4;
        EXPECT_EQ(exact.inter_node - with_hpz.inter_node, saved);
      }
    }
  }
}

TEST(EngineZeropp, QuantizedWeightsAreCloseAndCrossInInt8) {
  const int n = test_world().size();
  const Trained exact = train({.prefetch = false});
  const Trained quantized = train({.zeropp = R"("zero_quantized_weights": true)", .prefetch = false});
  EXPECT_LT(largest_relative_loss_difference(quantized, exact), 5e-3);
  if (n > 1) EXPECT_FALSE(same_weights(quantized, exact)) << "the gathers were not quantized";
  // Forward and backward gathers each move int8 messages instead of fp32 chunks.
  int64_t saved = 0;
  for (int64_t c : block_chunks()) saved += kZeroppSteps * 2 * other_nodes() * (4 * c - quantized_bytes(c, 8));
  EXPECT_EQ(exact.inter_node - quantized.inter_node, saved);
  // hpZ on top: the backward gathers come from the secondary partition instead.
  if (const int hpz = hpz_size()) {
    const Trained both = train({.zeropp = R"("zero_quantized_weights": true, "zero_hpz_partition_size": )" + std::to_string(hpz),
                            .prefetch = false});
    EXPECT_EQ(both.losses, quantized.losses) << "backward computes with the weights forward had";
    EXPECT_TRUE(same_weights(both, quantized));
    int64_t backward = 0;
    for (int64_t c : block_chunks()) backward += kZeroppSteps * other_nodes() * quantized_bytes(c, 8);
    EXPECT_EQ(quantized.inter_node - both.inter_node, backward);
  }
}

// SGD: the update is the gradient, scale and all (AdamW would hide a wrong scale).
TEST(EngineZeropp, QuantizedGradientsAreCloseAtStagesTwoAndThree) {
  const int n = test_world().size();
  for (int stage : {2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const Trained initial = train({.stage = stage, .optimizer = "SGD"}, 0);
    const Trained exact = train({.stage = stage, .optimizer = "SGD"}, 1);
    const Trained quantized = train({.zeropp = R"("zero_quantized_gradients": true)", .stage = stage, .optimizer = "SGD"}, 1);
    double difference = 0, update = 0;
    for (size_t i = 0; i < initial.weights.size(); ++i) {
      difference += (quantized.weights[i] - exact.weights[i]).pow(2).sum().item<double>();
      update += (exact.weights[i] - initial.weights[i]).pow(2).sum().item<double>();
    }
    const double relative = std::sqrt(difference / update);
    std::printf("[rank %d] stage %d: int4 gradients move the update by %.4f of its norm\n", test_world().rank(), stage,
                relative);
    // int4 rounds each value by up to half of max|block| / 7: some 8-10 % of this update's norm
    // on 2-4 ranks (a wrong scale or a lost term would be 100 % or more).
    EXPECT_LT(relative, 0.2);
    if (n > 1) EXPECT_GT(relative, 0) << "the reduce-scatters were not quantized";
  }
  // Stage 3's reductions, one per unit (the blocks and the root), cross as int4 messages.
  const Trained exact = train({.prefetch = false});
  const Trained quantized = train({.zeropp = R"("zero_quantized_gradients": true)", .prefetch = false});
  EXPECT_LT(largest_relative_loss_difference(quantized, exact), 5e-3);
  std::vector<int64_t> chunks = block_chunks();
  {
    torch::manual_seed(11);
    TinyTransformer model(model_options({}));
    int64_t root = 0;
    for (const auto& p : {model.wte->weight, model.wpe->weight, model.lnf->weight, model.lnf->bias}) root += p.numel();
    chunks.push_back((root + 8 * n - 1) / (8 * n) * 8);
  }
  int64_t saved = 0;
  for (int64_t c : chunks) saved += kZeroppSteps * other_nodes() * (4 * c - quantized_bytes(c, 4));
  EXPECT_EQ(exact.inter_node - quantized.inter_node, saved);
}

TEST(EngineZeropp, CheckpointsHoldFullPrecisionWeights) {
  const int hpz = hpz_size();
  std::string all = R"("zero_quantized_weights": true, "zero_quantized_gradients": true)";
  if (hpz) all += R"(, "zero_hpz_partition_size": )" + std::to_string(hpz);
  ScratchDir dir("zeropp_checkpoint");
  const Trained trained = train({.zeropp = all}, kZeroppSteps, dir.root.string());
  // Loaded into an engine without ZeRO++: its exact gather gives back the weights bit for bit.
  torch::manual_seed(5);
  auto model = std::make_shared<TinyTransformer>(model_options({}));
  zero::Engine engine(*model, config_for({}), test_world());
  engine.load_checkpoint(dir.root.string());
  {
    auto whole = engine.gathered_parameters();
    size_t i = 0;
    for (const auto& p : model->parameters()) EXPECT_TRUE(p.equal(trained.weights[i++])) << "parameter " << i;
  }
  if (!hpz) return;
  // hpZ: a forward leaves secondary partitions; a load drops them (they hold the old weights).
  auto other = std::make_shared<TinyTransformer>(model_options({}));
  zero::Engine with_hpz(*other, config_for({.zeropp = R"("zero_hpz_partition_size": )" + std::to_string(hpz)}),
                        test_world());
  auto [tokens, targets] = zero::models::tiny_batch(24, model_options({}), 1);
  const int64_t micro = 24 / test_world().size(), first = test_world().rank() * micro;
  (void)with_hpz.forward([&] { return other->loss(tokens.narrow(0, first, micro), targets.narrow(0, first, micro)); });
  EXPECT_GT(with_hpz.memory_report().secondary_partition, 0);
  with_hpz.load_checkpoint(dir.root.string());
  EXPECT_EQ(with_hpz.memory_report().secondary_partition, 0);
}

TEST(EngineZeropp, HpzGroupsMustDivideTheWorldAndStayOnAHost) {
  zero::World& w = test_world();
  const int n = w.size();
  auto build = [&](int hpz) {
    torch::manual_seed(11);
    auto model = std::make_shared<TinyTransformer>(model_options({}));
    zero::Engine engine(*model, config_for({.zeropp = R"("zero_hpz_partition_size": )" + std::to_string(hpz)}), w);
  };
  try {
    build(n + 1);
    FAIL() << "hpZ of " << n + 1 << " ranks accepted in a world of " << n;
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("zero_hpz_partition_size"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not divide the world size " + std::to_string(n)), std::string::npos)
        << e.what();
  }
  // Groups across hosts: an error on every rank (naming the hosts where the group crosses), even
  // where only some groups cross (ZERO_RANKS_PER_NODE=3 on 4 ranks: hosts of ranks 0-2 and 3).
  for (int hpz = 2; hpz <= n; ++hpz) {
    if (n % hpz != 0) continue;
    auto crosses = [&](int first) {
      for (int r = first; r < first + hpz; ++r) {
        if (w.node_of(r) != w.node_of(first)) return true;
      }
      return false;
    };
    bool any = false;
    for (int first = 0; first < n; first += hpz) any = any || crosses(first);
    if (!any) continue;
    SCOPED_TRACE("hpZ groups of " + std::to_string(hpz));
    try {
      build(hpz);
      FAIL() << "an hpZ group across hosts accepted";
    } catch (const zero::Error& e) {
      const std::string what = e.what();
      if (crosses(w.rank() / hpz * hpz)) {
        EXPECT_NE(what.find("within one host"), std::string::npos) << what;
        EXPECT_NE(what.find(w.host(w.rank() / hpz * hpz + hpz - 1)), std::string::npos) << what;
      } else {
        EXPECT_NE(what.find("failed on rank"), std::string::npos) << what;
      }
    }
  }
}

// qwZ rounds what units compute with; an exact gather of a unit kept whole with rounded values
// (after an evaluation forward, by default every unit stays whole for a backward) gathers again.
TEST(EngineZeropp, ExactGathersOfRoundedUnitsGatherAgain) {
  const auto o = model_options({});
  torch::manual_seed(11);
  auto model = std::make_shared<TinyTransformer>(o);
  zero::Config config = zero::Config::parse(R"({"train_batch_size": 24, "zero_optimization": {"stage": 3,
      "stage3_param_persistence_threshold": 0, "zero_quantized_weights": true},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}})");
  config.resolve({.world_size = test_world().size()});
  zero::Engine engine(*model, config, test_world());
  const int64_t micro = config.train_micro_batch_size_per_gpu, first = test_world().rank() * micro;
  auto [tokens, targets] = zero::models::tiny_batch(24, o, 1);
  at::Tensor x = tokens.narrow(0, first, micro), y = targets.narrow(0, first, micro);
  for (int step = 0; step < 2; ++step) {
    engine.backward(engine.forward([&] { return model->loss(x, y); }));
    engine.step();
  }
  std::vector<at::Tensor> exact;
  {
    auto whole = engine.gathered_parameters();
    for (const auto& p : model->parameters()) exact.push_back(p.detach().clone());
  }
  {
    at::NoGradGuard evaluation;
    (void)engine.forward([&] { return model->loss(x, y); });
  }
  auto whole = engine.gathered_parameters();
  size_t i = 0;
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.equal(exact[i++])) << "parameter " << i;
}
