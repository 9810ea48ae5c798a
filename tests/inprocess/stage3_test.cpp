// Stage 3's unit lifecycle with 1-4 ranks as threads: the states each unit passes through
// (shard_state.h), a prefetch in flight while the previous unit computes, kept units, invalid
// moves as errors, and the cross-rank gather-order check.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/thread_communicator.h"
#include "engine/flat_params.h"
#include "engine/stage3.h"
#include "zero/error.h"
#include "zero/unit.h"

using zero::engine::ShardState;
using zero::engine::StepMode;
using zero::engine::ShardLifecycle;

namespace {

thread_local std::function<void(int)> probe;  // called as each block runs, with its index

struct Block : torch::nn::Module {
  Block(int index, int width) : index(index) { linear = register_module("linear", torch::nn::Linear(width, width)); }
  at::Tensor forward(const at::Tensor& x) {
    if (probe) probe(index);
    return torch::tanh(linear(x));
  }
  int index;
  torch::nn::Linear linear{nullptr};
};

struct Net : torch::nn::Module {
  explicit Net(int width) {
    for (int i = 0; i < 3; ++i) units.push_back(register_module("u" + std::to_string(i), std::make_shared<zero::Unit<Block>>(i, width)));
    head = register_module("head", torch::nn::Linear(width, 1));  // outside every unit: the root
    torch::NoGradGuard no_grad;
    int k = 0;
    for (auto& p : parameters()) p.copy_(torch::sin(torch::arange(p.numel(), torch::kFloat) + 10 * k++).reshape(p.sizes()) * 0.3);
  }
  at::Tensor forward(at::Tensor x) {
    for (auto& u : units) x = u->forward(x);
    return head(x).sum();
  }
  std::vector<std::shared_ptr<zero::Unit<Block>>> units;
  torch::nn::Linear head{nullptr};
};

struct Rank {
  Net net{6};
  std::vector<at::Tensor> params;
  std::unique_ptr<zero::engine::FlatParams> flat;
  std::unique_ptr<zero::engine::BucketGroup> buckets;
  std::unique_ptr<zero::engine::Stage3> stage3;
  std::vector<int> bucket_of_unit;
  int root_bucket = -1;

  Rank(zero::Communicator& comm, zero::engine::Stage3Limits limits) {
    std::vector<std::string> names;
    for (const auto& item : net.named_parameters()) {
      params.push_back(item.value());
      names.push_back(item.key());
    }
    auto map = zero::engine::find_units(net, params, names);
    auto groups = map.group_of;
    flat = std::make_unique<zero::engine::FlatParams>(params, comm.size(), zero::engine::kWholeGroupBucket, groups);
    bucket_of_unit.assign(3, -1);
    for (size_t i = 0; i < params.size(); ++i) {
      const int b = flat->layout().slot(static_cast<int>(i)).bucket;
      if (groups[i] < 3) bucket_of_unit[static_cast<size_t>(groups[i])] = b; else root_bucket = b;
    }
    zero::engine::ReducerOptions options;
    options.gradients = zero::engine::ReducerOptions::Gradients::kStreamedIntoShards;
    buckets = std::make_unique<zero::engine::BucketGroup>(*flat, comm, options);
    stage3 = std::make_unique<zero::engine::Stage3>(*buckets, std::move(map), limits);
  }
  ShardState state(int b) const { return buckets->bucket(b).state(); }
  ShardState unit_state(int u) const { return state(bucket_of_unit[static_cast<size_t>(u)]); }
  at::Tensor forward(const at::Tensor& x) {
    stage3->begin_forward();
    at::Tensor loss = net.forward(x);
    stage3->end_forward();
    return loss;
  }
};

TEST(ShardLifecycle, TheLifecycleAndNothingElse) {
  ShardLifecycle root, unit(ShardState::kSharded);
  EXPECT_EQ(root.get(), ShardState::kPersistent);
  EXPECT_EQ(unit.get(), ShardState::kSharded);
  EXPECT_THROW(unit.set(ShardState::kKept, 1), zero::Error);      // keeping what is not whole
  EXPECT_THROW(root.set(ShardState::kSharded, 0), zero::Error);   // freeing the root
  unit.set(ShardState::kGathering, 1);
  EXPECT_THROW(unit.set(ShardState::kSharded, 1), zero::Error);   // freeing under a collective
  EXPECT_THROW(unit.set(ShardState::kKept, 1), zero::Error);
  unit.set(ShardState::kWhole, 1);
  unit.set(ShardState::kWhole, 1);  // idempotent
  unit.set(ShardState::kKept, 1);
  EXPECT_THROW(unit.set(ShardState::kGathering, 1), zero::Error);
  unit.set(ShardState::kSharded, 1);
  try {
    unit.set(ShardState::kKept, 1);
    FAIL();
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bucket 1 cannot go from sharded to kept"), std::string::npos) << e.what();
  }
}

TEST(Stage3Lifecycle, RecordsThenPrefetchesTheNextUnitWhileOneComputes) {
  for (int ranks = 1; ranks <= 4; ++ranks) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    auto group = zero::comm_detail::make_thread_group(ranks);
    Net reference(6);
    const at::Tensor x = torch::cos(torch::arange(12, torch::kFloat)).reshape({2, 6});
    const double expected = reference.forward(x).item<double>();
    zero::comm_detail::run_on_threads(ranks, [&](int r) {
      Rank rank(*group[r], {.max_reuse_distance = -1});  // nothing kept: only prefetch is on
      EXPECT_EQ(rank.state(rank.root_bucket), ShardState::kPersistent);
      for (int u = 0; u < 3; ++u) EXPECT_EQ(rank.unit_state(u), ShardState::kSharded);
      EXPECT_EQ(rank.stage3->mode(), StepMode::kRecording);
      std::vector<std::vector<ShardState>> seen;  // per block run: the three units' states
      probe = [&](int) { seen.push_back({rank.unit_state(0), rank.unit_state(1), rank.unit_state(2)}); };
      at::NoGradGuard no_grad;
      EXPECT_DOUBLE_EQ(rank.forward(x).item<double>(), expected);  // recording: all on demand
      EXPECT_EQ(rank.stage3->mode(), StepMode::kFollowing);
      EXPECT_DOUBLE_EQ(rank.forward(x).item<double>(), expected);  // following: prefetching
      probe = nullptr;
      using S = ShardState;
      const std::vector<std::vector<S>> want = {
          {S::kWhole, S::kSharded, S::kSharded}, {S::kSharded, S::kWhole, S::kSharded},
          {S::kSharded, S::kSharded, S::kWhole},
          // Following: while unit 0 computes, unit 1's all-gather is in flight; and so on.
          {S::kWhole, S::kGathering, S::kSharded}, {S::kSharded, S::kWhole, S::kGathering},
          {S::kSharded, S::kSharded, S::kWhole}};
      EXPECT_EQ(seen, want);
      for (int u = 0; u < 3; ++u) EXPECT_EQ(rank.unit_state(u), ShardState::kSharded);
    });
  }
}

TEST(Stage3Lifecycle, KeepsTheUnitsBackwardReusesAndReleasesThemOnce) {
  auto group = zero::comm_detail::make_thread_group(2);
  zero::comm_detail::run_on_threads(2, [&](int r) {
    Rank rank(*group[r], {});  // default limits: every unit is used again soon enough to keep
    const at::Tensor x = torch::ones({2, 6});
    rank.forward(x).backward();  // recording
    for (int u = 0; u < 3; ++u) EXPECT_EQ(rank.unit_state(u), ShardState::kWhole);  // gathered by backward
    rank.buckets->release_all();
    at::Tensor loss = rank.forward(x);
    for (int u = 0; u < 3; ++u) EXPECT_EQ(rank.unit_state(u), ShardState::kKept) << "unit " << u;
    // Reuses them (no gather); each unit's bucket releases itself once its gradients are in.
    rank.buckets->begin_backward(true);
    loss.backward();
    rank.buckets->end_backward();
    for (int u = 0; u < 3; ++u) EXPECT_EQ(rank.unit_state(u), ShardState::kSharded);
    rank.buckets->bucket(rank.bucket_of_unit[0]).release();  // idempotent
    rank.buckets->bucket(rank.bucket_of_unit[1]).gather();
    rank.buckets->bucket(rank.bucket_of_unit[1]).gather();  // idempotent: one all-gather
    EXPECT_EQ(rank.unit_state(1), ShardState::kWhole);
    EXPECT_THROW(rank.buckets->bucket(rank.root_bucket).release(), zero::Error);  // the root is never freed
    rank.stage3->verify_order({"a", "b", "c", "d", "e", "f", "g", "h"});
  });
}

TEST(Stage3Lifecycle, RanksGatheringInDifferentOrdersFailTheOrderCheck) {
  auto group = zero::comm_detail::make_thread_group(2);
  std::vector<std::string> errors(2);
  zero::comm_detail::run_on_threads(2, [&](int r) {
    Rank rank(*group[r], {});
    // Same-sized units gathered in different orders: the all-gathers match, the shards would mix.
    rank.buckets->bucket(rank.bucket_of_unit[r == 0 ? 0 : 1]).gather();
    rank.buckets->bucket(rank.bucket_of_unit[r == 0 ? 1 : 0]).gather();
    std::vector<std::string> names;
    for (const auto& item : rank.net.named_parameters()) names.push_back(item.key());
    try {
      rank.stage3->verify_order(names);
    } catch (const zero::Error& e) {
      errors[r] = e.what();
    }
  });
  const std::string what = "ranks gathered units in different orders: gather #1 was the unit holding u0";
  EXPECT_NE(errors[0].find(what), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find(what), std::string::npos) << errors[1];  // the same error on every rank
}

}  // namespace
