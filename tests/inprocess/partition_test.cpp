// The partition — what a rank owns of every bucket — at 1-4 ranks as threads: its master is the
// owned slices of the parameters, one SGD step on it lands in every rank's parameters through
// sync_parameters (whole all-gathers and allgather_bucket_size pieces alike), and its storage is
// what the layout says, counted exactly.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/thread_communicator.h"
#include "engine/bucket.h"
#include "engine/flat_params.h"
#include "engine/partition.h"

using zero::engine::BucketGroup;
using zero::engine::FlatParams;
using zero::engine::Partition;

namespace {

const std::vector<std::vector<int64_t>> kShapes = {{7, 3}, {5}, {4, 6}, {11}, {2, 9}};

at::Tensor initial(size_t i) {
  int64_t n = c10::multiply_integers(kShapes[i]);
  return torch::sin(torch::arange(n, torch::kFloat) + 100 * static_cast<int64_t>(i)).reshape(kShapes[i]);
}

zero::OptimizerConfig sgd(double lr) {
  zero::OptimizerConfig c;
  c.type = zero::OptimizerType::kSgd;
  c.lr = lr;
  c.weight_decay = 0;
  return c;
}

struct PartitionCase {
  int ranks, stage;
  at::ScalarType dtype;
  int64_t allgather_bucket_size;
};

// Every rank: parameters, a partition, one SGD step with gradient g = the parameter's index + 1
// everywhere; returns the parameters afterwards.
std::vector<at::Tensor> train_one_step(const PartitionCase& c, zero::Communicator& comm, int64_t* master_bytes,
                                       int64_t* gradient_bytes, bool* master_matches) {
  std::vector<at::Tensor> params;
  for (size_t i = 0; i < kShapes.size(); ++i) params.push_back(initial(i).to(c.dtype).requires_grad_(true));
  const int partitions = c.stage == 0 ? 1 : comm.size();
  FlatParams flat(params, partitions, 30);
  const int owner = flat.layout().owned_shard(comm.rank());
  Partition partition(flat, comm, {owner}, c.stage >= 2);
  zero::engine::ReducerOptions options;
  options.gradients = c.stage >= 2 ? zero::engine::ReducerOptions::Gradients::kStreamedIntoShards
                                   : zero::engine::ReducerOptions::Gradients::kInBucketBuffers;
  options.whole_buckets = c.stage == 0;
  options.allgather_bucket_size = c.allgather_bucket_size;  // the buckets' parameter sync
  BucketGroup buckets(flat, comm, options, partition.gradient_home());
  partition.make_master(buckets);
  partition.make_optimizer(sgd(0.5), {}, 16, comm.rank());
  // The master holds this rank's fragments of the parameters, placed by the layout.
  at::Tensor grads = torch::zeros({flat.layout().owned_numel()});
  *master_matches = partition.master().numel() == flat.layout().owned_numel();
  for (size_t i = 0; i < params.size(); ++i) {
    if (auto f = flat.layout().fragment(static_cast<int>(i), owner)) {
      const int64_t n = f->param_end - f->param_begin;
      *master_matches &= partition.master()
                             .narrow(0, f->owned_offset, n)
                             .equal(initial(i).to(c.dtype).to(torch::kFloat).reshape(-1).narrow(0, f->param_begin, n));
      grads.narrow(0, f->owned_offset, n).fill_(static_cast<double>(i + 1));
    }
  }
  partition.step(grads, {.lr = 0.5});
  partition.sync_parameters();
  *master_bytes = partition.master_bytes();
  *gradient_bytes = partition.gradient_bytes();
  std::vector<at::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone());
  return out;
}

TEST(Partition, OneSgdStepReachesEveryRanksParameters) {
  for (int ranks = 1; ranks <= 4; ++ranks)
    for (int stage : {0, 1, 2})
      for (auto dtype : {at::kFloat, at::kBFloat16})
        for (int64_t allgather : {int64_t{0}, int64_t{12}}) {
          const PartitionCase c{ranks, stage, dtype, allgather};
          SCOPED_TRACE(std::to_string(ranks) + " ranks, stage " + std::to_string(stage) + ", " +
                       c10::toString(dtype) + ", allgather_bucket_size " + std::to_string(allgather));
          auto group = zero::comm_detail::make_thread_group(ranks);
          std::vector<std::vector<at::Tensor>> after(static_cast<size_t>(ranks));
          std::vector<int64_t> master_bytes(static_cast<size_t>(ranks)), gradient_bytes(static_cast<size_t>(ranks));
          std::vector<char> matches(static_cast<size_t>(ranks));
          zero::comm_detail::run_on_threads(ranks, [&](int r) {
            bool ok = false;
            after[r] = train_one_step(c, *group[r], &master_bytes[r], &gradient_bytes[r], &ok);
            matches[r] = ok;
          });
          for (int r = 0; r < ranks; ++r) {
            EXPECT_TRUE(matches[r]) << "rank " << r << ": the master is not the owned slices of the parameters";
            for (size_t i = 0; i < kShapes.size(); ++i) {
              // SGD: w - lr × g, in fp32 on the master, then rounded once to the model's dtype.
              const at::Tensor expected = (initial(i).to(dtype).to(torch::kFloat) - 0.5 * static_cast<double>(i + 1)).to(dtype);
              EXPECT_TRUE(after[r][i].equal(expected)) << "rank " << r << " parameter " << i;
            }
          }
          // Exact storage: fp32 at one partition is the parameters themselves; else the owned
          // shard (padding included) in fp32. The gradient accumulator exists from stage 2 on.
          const int partitions = stage == 0 ? 1 : ranks;
          int64_t padded = 0;
          {
            std::vector<at::Tensor> probe;
            for (size_t i = 0; i < kShapes.size(); ++i) probe.push_back(torch::zeros(kShapes[i], dtype).requires_grad_(true));
            padded = FlatParams(probe, partitions, 30).layout().padded_numel();
          }
          const int64_t owned = padded / partitions;
          EXPECT_EQ(master_bytes[0], partitions == 1 && dtype == at::kFloat ? 0 : 4 * owned);
          EXPECT_EQ(gradient_bytes[0], stage >= 2 ? 4 * owned : 0);
        }
}

TEST(Partition, StatesAndHomesAreNamedInOnePlace) {
  auto group = zero::comm_detail::make_thread_group(2);
  zero::comm_detail::run_on_threads(2, [&](int r) {
    std::vector<at::Tensor> params = {initial(0).requires_grad_(true), initial(1).requires_grad_(true)};
    FlatParams flat(params, 2, 30);
    Partition partition(flat, *group[r], {r}, true);
    zero::engine::ReducerOptions options;
    options.gradients = zero::engine::ReducerOptions::Gradients::kStreamedIntoShards;
    BucketGroup buckets(flat, *group[r], options, partition.gradient_home());
    partition.make_master(buckets);
    zero::OptimizerConfig adam;
    adam.type = zero::OptimizerType::kAdamW;
    partition.make_optimizer(adam, {}, 0, r);
    std::vector<std::string> names;
    for (const auto& [name, tensor] : partition.states()) {
      names.push_back(name);
      EXPECT_EQ(tensor.numel(), flat.layout().owned_numel()) << name;
    }
    EXPECT_EQ(names, (std::vector<std::string>{"master", "exp_avg", "exp_avg_sq"}));
    EXPECT_EQ(partition.state_bytes(), 2 * 4 * flat.layout().owned_numel());
    EXPECT_EQ(partition.homes().master, zero::engine::Memory::kHost);
    EXPECT_EQ(partition.gradient_accumulator().numel(), flat.layout().owned_numel());
  });
}

}  // namespace
