// The engine under mpirun -np 1..4: every stage follows the single-process stage-0 trajectory
// (computed in the same process on a world of one), and its memory and communication are exact.
#include "zero/engine.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "dist_test_world.h"
#include "engine_test_util.h"
#include "layout/bucket_layout.h"
#include "zero/error.h"

namespace {

using namespace engine_test;

const Trajectory& reference() {
  static Trajectory ref = [] {
    zero::World single = zero::World::single_process();
    return train(config_json(0, 1, false), single);
  }();
  return ref;
}

void expect_same_trajectory(const Trajectory& got, const std::string& what) {
  const Trajectory& ref = reference();
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-5 * std::abs(ref.losses[i])) << what << " step " << i;
  }
  ASSERT_EQ(got.weights.size(), ref.weights.size());
  for (size_t i = 0; i < ref.weights.size(); ++i) {
    const double diff = (got.weights[i] - ref.weights[i]).abs().max().item<double>();
    const double scale = ref.weights[i].abs().max().item<double>();
    EXPECT_LE(diff, 1e-5 * scale) << what << " weight " << i;
  }
}

}  // namespace

class EngineEquivalence : public ::testing::TestWithParam<std::tuple<int, int, bool>> {};

TEST_P(EngineEquivalence, MatchesSingleProcessStageZero) {
  const auto [stage, accumulation, overlap] = GetParam();
  Trajectory got = train(config_json(stage, accumulation, overlap), test_world());
  expect_same_trajectory(got, "stage " + std::to_string(stage) + " gas " + std::to_string(accumulation) +
                                  (overlap ? " overlap" : "") + " at " + std::to_string(test_world().size()) +
                                  " ranks");
}

INSTANTIATE_TEST_SUITE_P(Stages, EngineEquivalence,
                         ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values(1, 2, 4),
                                            ::testing::Values(false, true)));

TEST(EngineEquivalence, TheReferenceActuallyTrains) {
  // A trajectory that does not train would match trivially.
  const Trajectory& ref = reference();
  EXPECT_LT(ref.losses.back(), 0.8 * ref.losses.front());
  torch::manual_seed(42);
  Mlp initial;
  auto start = initial.parameters();  // the same seed gives the same initial weights
  ASSERT_EQ(start.size(), ref.weights.size());
  for (size_t i = 0; i < start.size(); ++i) {
    EXPECT_GT((ref.weights[i] - start[i]).abs().max().item<double>(), 1e-3) << "weight " << i << " never moved";
  }
}

TEST(EngineOptimizers, EveryOptimizerIsPartitionIndependent) {
  // Each optimizer at stages 1 and 2 on this world against stage 0 on one process. Lamb's trust
  // ratio needs whole-parameter norms, summed over the ranks that hold a parameter's pieces.
  const char* optimizers[] = {
      R"({"type": "Lamb", "params": {"lr": 0.01, "weight_decay": 0.01}})",
      R"({"type": "Lion", "params": {"lr": 0.001, "weight_decay": 0.1}})",
      R"({"type": "Adagrad", "params": {"lr": 0.05}})",
      R"({"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9, "nesterov": true}})",
      R"({"type": "Adam", "params": {"lr": 0.01, "adam_w_mode": false, "weight_decay": 0.01}})"};
  for (const char* optimizer : optimizers) {
    auto json = [&](int stage) {
      std::string j = config_json(stage, 1, false);
      const size_t begin = j.find(R"("optimizer": )") + 13, end = j.find(R"(},
      "scheduler")") + 1;
      return j.substr(0, begin) + optimizer + j.substr(end, j.size() - end - 1) +
             R"(, "zero_allow_untested_optimizer": true})";
    };
    const zero::Config parsed = zero::Config::parse(json(1));
    ASSERT_NE(std::string(optimizer).find(parsed.optimizer.type_name), std::string::npos) << json(1);
    ASSERT_EQ(parsed.scheduler.type, zero::SchedulerType::kWarmupLR) << json(1);
    zero::World single = zero::World::single_process();
    const Trajectory ref = train(json(0), single);
    for (int stage : {1, 2}) {
      Trajectory got = train(json(stage), test_world());
      for (size_t i = 0; i < ref.weights.size(); ++i) {
        const double scale = ref.weights[i].abs().max().item<double>();
        EXPECT_LE((got.weights[i] - ref.weights[i]).abs().max().item<double>(), 1e-5 * scale)
            << optimizer << " stage " << stage << " weight " << i;
      }
    }
  }
}

namespace {
std::string with_top_level(std::string json, const std::string& keys) { return "{" + keys + ", " + json.substr(1); }
}  // namespace

TEST(EngineReduction, CommunicationDataTypeAndPrescaling) {
  zero::World& world = test_world();
  const int n = world.size();
  for (int stage : {0, 1, 2}) {
    // bf16 on the wire: half the bytes, and the trajectory stays close to fp32's.
    const std::string bf16_wire = with_top_level(config_json(stage, 1, false), R"("communication_data_type": "bf16")");
    if (n > 1) {
      OneStep s = one_step(bf16_wire, world);
      const auto op = stage == 0 ? zero::CollectiveOp::kAllReduce : zero::CollectiveOp::kReduceScatter;
      EXPECT_EQ(s.engine->comm_stats().total(op).message_bytes, mlp_layout(stage == 0 ? 1 : n).padded_numel() * 2)
          << "stage " << stage;
    }
    const Trajectory& ref = reference();
    Trajectory got = train(bf16_wire, world);
    for (size_t i = 0; i < ref.losses.size(); ++i) {
      EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-2 * ref.losses[i]) << "bf16 wire, stage " << stage << " step " << i;
    }
    // fp32 on the wire, and pre-dividing by 2 before the reduction, change nothing beyond rounding.
    for (const char* keys :
         {R"("communication_data_type": "fp32")", R"("prescale_gradients": true, "gradient_predivide_factor": 2.0)"}) {
      Trajectory same = train(with_top_level(config_json(stage, 1, false), keys), world);
      for (size_t i = 0; i < ref.losses.size(); ++i) {
        EXPECT_NEAR(same.losses[i], ref.losses[i], 1e-5 * ref.losses[i]) << keys << " stage " << stage << " step " << i;
      }
    }
    if (stage == 0) continue;
    // reduce_scatter: false all-reduces the buckets instead: same trajectory, twice the bytes.
    std::string all_reduce = config_json(stage, 1, false);
    all_reduce.replace(all_reduce.find(R"("reduce_bucket_size")"), 0, R"("reduce_scatter": false, )");
    Trajectory same = train(all_reduce, world);
    for (size_t i = 0; i < ref.losses.size(); ++i) {
      EXPECT_NEAR(same.losses[i], ref.losses[i], 1e-5 * ref.losses[i]) << "reduce_scatter false, stage " << stage;
    }
    if (n > 1) {
      OneStep s = one_step(all_reduce, world);
      ASSERT_FALSE(s.engine->config().zero.reduce_scatter);
      EXPECT_EQ(s.engine->comm_stats().total(zero::CollectiveOp::kReduceScatter).calls, 0);
      EXPECT_EQ(s.engine->comm_stats().total(zero::CollectiveOp::kAllReduce).message_bytes,
                mlp_layout(n).padded_numel() * 4 + 8);
    }
  }
}

TEST(EngineReduction, ZeroBucketSizesMeanWhatDeepSpeedMeans) {
  // reduce_bucket_size 0: every parameter is its own bucket (the MLP's 4: 4 reduce-scatters a
  // step); allgather_bucket_size 0: no limit on a gather; sub_group_size 0: a step tile per
  // parameter. The trajectory is the reference's.
  zero::World& world = test_world();
  for (int stage : {1, 2}) {
    std::string json = config_json(stage, 1, false);
    json.replace(json.find(R"("reduce_bucket_size": 100)"), 25,
                 R"("reduce_bucket_size": 0, "allgather_bucket_size": 0, "sub_group_size": 0)");
    Trajectory got = train(json, world);
    const Trajectory& ref = reference();
    for (size_t i = 0; i < ref.weights.size(); ++i) {
      const double scale = ref.weights[i].abs().max().item<double>();
      EXPECT_LE((got.weights[i] - ref.weights[i]).abs().max().item<double>(), 1e-5 * scale) << "stage " << stage;
    }
    if (world.size() == 1) continue;
    OneStep s = one_step(json, world);
    const auto reductions = s.engine->comm_stats().total(zero::CollectiveOp::kReduceScatter);
    EXPECT_EQ(reductions.calls, 4) << "stage " << stage;
    EXPECT_EQ(s.engine->comm_stats().total(zero::CollectiveOp::kAllGather).calls, 4) << "stage " << stage;
  }
}

TEST(EngineReduction, AllGatherInPiecesOfAllgatherBucketSize) {
  zero::World& world = test_world();
  const int n = world.size();
  for (int stage : {1, 2}) {
    const std::string json = config_json(stage, 1, false);
    std::string small = json;
    small.replace(small.find(R"("reduce_bucket_size": 100)"), 25,
                  R"("reduce_bucket_size": 100, "allgather_bucket_size": 40)");
    Trajectory got = train(small, world);
    const Trajectory& ref = reference();
    for (size_t i = 0; i < ref.weights.size(); ++i) {
      const double scale = ref.weights[i].abs().max().item<double>();
      EXPECT_LE((got.weights[i] - ref.weights[i]).abs().max().item<double>(), 1e-5 * scale) << "stage " << stage;
    }
    if (n == 1) continue;
    // Same bytes as whole-bucket gathers, in pieces of at most 40 elements.
    OneStep s = one_step(small, world);
    const zero::Engine& engine = *s.engine;
    const zero::layout::BucketLayout layout = mlp_layout(n);
    int64_t pieces = 0;
    for (const auto& b : layout.buckets()) {
      const int64_t columns = std::max<int64_t>(1, 40 / n);
      pieces += (b.shard + columns - 1) / columns;
    }
    const zero::OpStats gathers = engine.comm_stats().total(zero::CollectiveOp::kAllGather);
    EXPECT_EQ(gathers.message_bytes, layout.padded_numel() * 4) << "stage " << stage;
    EXPECT_EQ(gathers.calls, pieces) << "stage " << stage;
    for (const auto& [key, stats] : engine.comm_stats().by_size()) {
      if (key.first == zero::CollectiveOp::kAllGather) EXPECT_LE(key.second, 40 * 4) << "a gather above 40 elements";
    }
  }
}

TEST(EngineMemory, ReportMatchesTheZeroFormulas) {
  zero::World& world = test_world();
  const int n = world.size();
  for (int stage : {0, 1, 2}) {
    torch::manual_seed(42);
    auto model = std::make_shared<Mlp>();
    zero::Config config = zero::Config::parse(config_json(stage, 1, false));
    config.resolve({.world_size = n});
    zero::Engine engine(*model, config, world);
    // The layout the engine must use: reverse registration order, fp32 alignment 8.
    const int partitions = stage == 0 ? 1 : n;
    zero::layout::BucketLayout layout({32 * 16, 32, 8 * 32, 8}, partitions, 8, 100, {3, 2, 1, 0});
    const int64_t padded = layout.padded_numel(), owned = layout.owned_numel();
    int64_t first_step_buckets = 0;
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(5);
      at::Tensor loss = torch::mse_loss(model->forward(torch::randn({2, 16})), torch::randn({2, 8}));
      engine.backward(loss);
      engine.step();
      if (step == 0) first_step_buckets = engine.memory_report().buckets;
    }
    zero::MemoryReport r = engine.memory_report();
    EXPECT_EQ(r.buckets, first_step_buckets) << "stage " << stage << ": the bucket pool grew after the first step";
    EXPECT_EQ(r.parameters, padded * 4) << "stage " << stage;
    EXPECT_EQ(r.gradients, stage < 2 ? padded * 4 : owned * 4) << "stage " << stage;
    // One partition of an fp32 model: the optimizer steps the parameters themselves.
    EXPECT_EQ(r.master_weights, partitions == 1 ? 0 : owned * 4) << "stage " << stage;
    EXPECT_EQ(r.optimizer_state, 2 * owned * 4) << "stage " << stage;
    EXPECT_EQ(r.padding_elements, padded - (512 + 32 + 256 + 8)) << "stage " << stage;
    if (stage == 2) {
      int64_t largest = 0;
      for (const auto& b : layout.buckets()) largest = std::max(largest, b.padded);
      EXPECT_GT(r.buckets, 0);
      EXPECT_EQ(r.buckets % (largest * 4), 0);  // whole pool buffers of the largest bucket
      // Two buffers at most while reductions can give one back; here fc2.bias's gradient comes
      // last, so every later bucket waits for bucket 0 holding a buffer: one per bucket.
      EXPECT_LE(r.buckets, static_cast<int64_t>(layout.buckets().size()) * largest * 4);
    } else {
      EXPECT_EQ(r.buckets, 0);
    }
  }
}

TEST(EngineCommunication, BytesPerStepMatchTheory) {
  zero::World& world = test_world();
  const int n = world.size();
  if (n == 1) GTEST_SKIP() << "a world of one communicates nothing";
  for (int stage : {0, 1, 2}) {
    for (int accumulation : {1, 2}) {
      torch::manual_seed(42);
      auto model = std::make_shared<Mlp>();
      zero::Config config = zero::Config::parse(config_json(stage, accumulation, false));
      config.resolve({.world_size = n});
      zero::Engine engine(*model, config, world);
      zero::layout::BucketLayout layout({512, 32, 256, 8}, stage == 0 ? 1 : n, 8, 100, {3, 2, 1, 0});
      const int64_t padded_bytes = layout.padded_numel() * 4;
      std::map<zero::CollectiveOp, zero::OpStats> before;
      for (auto op :
           {zero::CollectiveOp::kAllReduce, zero::CollectiveOp::kReduceScatter, zero::CollectiveOp::kAllGather}) {
        before[op] = engine.comm_stats().total(op);
      }
      for (int m = 0; m < accumulation; ++m) {
        torch::manual_seed(5 + m);
        engine.backward(torch::mse_loss(model->forward(torch::randn({2, 16})), torch::randn({2, 8})));
        engine.step();
      }
      auto delta = [&](zero::CollectiveOp op) {
        zero::OpStats now = engine.comm_stats().total(op);
        return std::make_pair(now.message_bytes - before[op].message_bytes, now.bus_bytes - before[op].bus_bytes);
      };
      const std::string what = "stage " + std::to_string(stage) + " gas " + std::to_string(accumulation);
      const double share = double(n - 1) / n;
      if (stage == 0) {
        // One all-reduce of every bucket on the boundary; every rank then holds the whole
        // gradient, so the norm needs no communication.
        EXPECT_EQ(delta(zero::CollectiveOp::kAllReduce).first, padded_bytes) << what;
        EXPECT_DOUBLE_EQ(delta(zero::CollectiveOp::kAllReduce).second, 2 * share * padded_bytes) << what;
        EXPECT_EQ(delta(zero::CollectiveOp::kReduceScatter).first, 0) << what;
        EXPECT_EQ(delta(zero::CollectiveOp::kAllGather).first, 0) << what;
      } else {
        // Reduce-scatter of every bucket (stage 1: on the boundary; stage 2: every micro-step),
        // all-gather of every bucket after the step, the norm's 8 bytes.
        const int reductions = stage == 1 ? 1 : accumulation;
        EXPECT_EQ(delta(zero::CollectiveOp::kReduceScatter).first, reductions * padded_bytes) << what;
        EXPECT_DOUBLE_EQ(delta(zero::CollectiveOp::kReduceScatter).second, reductions * share * padded_bytes) << what;
        EXPECT_EQ(delta(zero::CollectiveOp::kAllGather).first, padded_bytes) << what;
        EXPECT_DOUBLE_EQ(delta(zero::CollectiveOp::kAllGather).second, share * padded_bytes) << what;
        EXPECT_EQ(delta(zero::CollectiveOp::kAllReduce).first, 8) << what;
      }
    }
  }
}

TEST(EngineErrors, UnhonouredSettingsAreNamed) {
  torch::manual_seed(42);
  auto model = std::make_shared<Mlp>();
  zero::Config config = zero::Config::parse(R"({"train_batch_size": 48, "wall_clock_breakdown": true,
      "zero_optimization": {"stage": 1, "round_robin_gradients": true, "contiguous_gradients": false},
      "optimizer": {"type": "AdamW"}})");
  config.resolve({.world_size = test_world().size()});
  zero::Engine engine(*model, config, test_world());
  ASSERT_EQ(engine.warnings().size(), 2u);  // wall_clock_breakdown is honoured: not among them
  EXPECT_EQ(engine.warnings()[0].rfind("zero_optimization.contiguous_gradients: ", 0), 0u);
  EXPECT_EQ(engine.warnings()[1].rfind("zero_optimization.round_robin_gradients: ", 0), 0u);
  zero::Config plain = zero::Config::parse(config_json(2, 1, true));
  plain.resolve({.world_size = test_world().size()});
  EXPECT_TRUE(zero::Engine(*model, plain, test_world()).warnings().empty());
}

TEST(EngineApi, NoSyncAccumulatesLocallyAndStepNeedsAReducedBoundary) {
  zero::World& world = test_world();
  for (int stage : {0, 1}) {
    // Two micro-steps under no_sync then one outside equals three ordinary micro-steps.
    Trajectory runs[2];
    for (int variant = 0; variant < 2; ++variant) {
      torch::manual_seed(42);
      auto model = std::make_shared<Mlp>();
      std::string json = config_json(stage, 3, false);  // a batch of 3 micro-steps × 4 rows per rank
      json.replace(json.find("48"), 2, std::to_string(12 * world.size()));
      zero::Config config = zero::Config::parse(json);
      config.resolve({.world_size = world.size()});
      zero::Engine engine(*model, config, world);
      for (int m = 0; m < 3; ++m) {
        torch::manual_seed(70 + m);
        at::Tensor x = torch::randn({4, 16});
        at::Tensor loss = model->loss(x, teacher(x));
        if (variant == 1 && m < 2) {
          auto guard = engine.no_sync();
          engine.backward(loss);
        } else {
          engine.backward(loss);
        }
        engine.step();
      }
      EXPECT_TRUE(engine.was_step_applied());
      for (const auto& p : model->parameters()) runs[variant].weights.push_back(p.detach().clone());
    }
    for (size_t i = 0; i < runs[0].weights.size(); ++i)
      EXPECT_TRUE(runs[0].weights[i].equal(runs[1].weights[i])) << stage;
  }
  // A boundary backward under no_sync cannot be stepped.
  torch::manual_seed(42);
  auto model = std::make_shared<Mlp>();
  zero::Config config = zero::Config::parse(config_json(1, 1, false));
  config.resolve({.world_size = world.size()});
  zero::Engine engine(*model, config, world);
  {
    auto guard = engine.no_sync();
    engine.backward(model->loss(torch::randn({4, 16}), torch::randn({4, 8})));
  }
  EXPECT_THROW(engine.step(), zero::Error);
  // Stage 2 refuses no_sync.
  zero::Config two = zero::Config::parse(config_json(2, 1, false));
  two.resolve({.world_size = world.size()});
  zero::Engine stage2(*model, two, world);
  EXPECT_THROW(stage2.no_sync(), zero::Error);
}

TEST(EngineApi, ZeroGradTrainEval) {
  torch::manual_seed(42);
  auto model = std::make_shared<Mlp>();
  zero::Config config = zero::Config::parse(config_json(1, 2, false));
  config.resolve({.world_size = test_world().size()});
  zero::Engine engine(*model, config, test_world());
  engine.eval();
  EXPECT_FALSE(model->is_training());
  engine.train();
  EXPECT_TRUE(model->is_training());
  engine.backward(model->loss(torch::randn({4, 16}), torch::randn({4, 8})));
  engine.step();  // not a boundary
  EXPECT_TRUE(model->fc1->weight.grad().abs().sum().item<double>() > 0);
  engine.zero_grad();
  EXPECT_EQ(model->fc1->weight.grad().abs().sum().item<double>(), 0.0);
}

TEST(EngineApi, StepWithoutBackwardSeesZeroGradients) {
  // Stage 2 zeroes its gradient accumulator lazily (the next reduction overwrites it): a step with
  // no backward since the last one must still see zeros, not the previous step's gradients.
  for (int stage : {0, 1, 2}) {
    torch::manual_seed(42);
    auto model = std::make_shared<Mlp>();
    zero::Config config = zero::Config::parse(config_json(stage, 1, false));
    config.resolve({.world_size = test_world().size()});
    zero::Engine engine(*model, config, test_world());
    engine.backward(model->loss(torch::randn({4, 16}), torch::randn({4, 8})));
    engine.step();
    EXPECT_GT(engine.get_global_grad_norm(), 0.0) << "stage " << stage;
    engine.step();
    EXPECT_EQ(engine.get_global_grad_norm(), 0.0) << "stage " << stage;
  }
}

TEST(EngineLifetime, TheModelOutlivesTheEngine) {
  torch::manual_seed(42);
  auto model = std::make_shared<Mlp>();
  for (int stage : {0, 2}) {
    {
      zero::Config config = zero::Config::parse(config_json(stage, 1, false));
      config.resolve({.world_size = test_world().size()});
      zero::Engine engine(*model, config, test_world());
    }
    // No hook of the destroyed engine may fire now; plain LibTorch training still works.
    for (auto& p : model->parameters()) p.mutable_grad().reset();
    torch::mse_loss(model->forward(torch::randn({2, 16})), torch::randn({2, 8})).backward();
    EXPECT_TRUE(model->fc1->weight.grad().defined()) << "stage " << stage;
  }
}

TEST(EngineErrors, UnsupportedConfigsAreClearErrors) {
  torch::manual_seed(42);
  auto model = std::make_shared<Mlp>();
  zero::Config offload = zero::Config::parse(R"({"train_batch_size": 48,
      "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/nonexistent/zerocpp"}},
      "optimizer": {"type": "AdamW"}})");
  offload.resolve({.world_size = test_world().size()});
  EXPECT_THROW(zero::Engine(*model, offload, test_world()), zero::Error);
  zero::Config no_optimizer = zero::Config::parse(R"({"train_batch_size": 48})");
  no_optimizer.resolve({.world_size = test_world().size()});
  try {
    zero::Engine engine(*model, no_optimizer, test_world());
    FAIL();
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no \"optimizer\" block"), std::string::npos) << e.what();
  }
}

// The step runs 256 Ki elements at a time from the gradients where they are (Partition::
// step_from), writing each slice into the parameters at its offset. The MLP above has buckets of
// a few hundred elements: here one bucket of 1.1 M elements, so every rank's owned shard is
// several slices, the last one ragged. Stages 1-2 (which step by slices) follow stage 0 on one
// process (whose master is the parameters: the whole-buffer step), weight by weight. SGD with
// momentum: a slice at the wrong offset or scale moves weights by its whole update (AdamW's
// normalised update would also amplify the ranks' summation order in near-zero gradients).
TEST(EngineSlices, ABucketOfManySlicesStepsAsOneBuffer) {
  struct Wide : torch::nn::Module {
    Wide() {
      fc1 = register_module("fc1", torch::nn::Linear(16, 1056));
      fc2 = register_module("fc2", torch::nn::Linear(1056, 1040));
      fc3 = register_module("fc3", torch::nn::Linear(1040, 8));
    }
    torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  };
  auto run = [](int stage, zero::World& world) {
    torch::manual_seed(42);
    Wide model;
    zero::Config config = zero::Config::parse(R"({"train_batch_size": 48, "gradient_clipping": 1.0, "zero_allow_untested_optimizer": true,
        "zero_optimization": {"stage": )" + std::to_string(stage) + R"(},
        "optimizer": {"type": "SGD", "params": {"lr": 0.2, "momentum": 0.9, "weight_decay": 0.01}}})");
    config.resolve({.world_size = world.size()});
    zero::Engine engine(model, config, world);
    const int64_t micro = config.train_micro_batch_size_per_gpu;
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(1000 + step);
      const at::Tensor x = torch::randn({kGlobalBatch, 16}), y = teacher(x);
      const at::Tensor xs = x.narrow(0, world.rank() * micro, micro), ys = y.narrow(0, world.rank() * micro, micro);
      const at::Tensor loss = engine.forward([&] {
        return torch::mse_loss(model.fc3(torch::tanh(model.fc2(torch::tanh(model.fc1(xs))))), ys);
      });
      engine.backward(loss);
      engine.step();
    }
    std::vector<at::Tensor> weights;
    for (const auto& p : model.parameters()) weights.push_back(p.detach().clone());
    return weights;
  };
  zero::World single = zero::World::single_process();
  const std::vector<at::Tensor> whole = run(0, single);
  torch::manual_seed(42);
  EXPECT_GT((whole[2] - Wide().fc2->weight).abs().max().item<double>(), 1e-4) << "the weights must move";
  for (const int stage : {1, 2}) {
    const std::vector<at::Tensor> sliced = run(stage, test_world());
    ASSERT_EQ(sliced.size(), whole.size());
    for (size_t i = 0; i < whole.size(); ++i) {
      const double diff = (sliced[i] - whole[i]).abs().max().item<double>();
      EXPECT_LE(diff, 1e-5 * whole[i].abs().max().item<double>()) << "stage " << stage << " weight " << i;
    }
  }
}
