// The in-process thread group against results computed here from what every rank contributes:
// the unit tests of the reducer, the partitions and stage 3 stand on it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/thread_communicator.h"
#include "zero/error.h"

using zero::ReduceOp;
using zero::comm_detail::make_thread_group;
using zero::comm_detail::run_on_threads;

namespace {

at::Tensor contribution(int rank, int64_t n, at::ScalarType dtype) {
  return ((torch::arange(n, torch::kLong) * 3 + rank * 7) % 11 - 5).to(dtype);
}

TEST(ThreadGroup, ReductionsMatchALocalSumAtOneToFourRanks) {
  for (int size = 1; size <= 4; ++size) {
    for (auto dtype : {at::kFloat, at::kBFloat16, at::kInt}) {
      auto ranks = make_thread_group(size);
      const int64_t chunk = 5, n = chunk * size;
      at::Tensor expected = torch::zeros({n}, torch::kDouble);
      for (int r = 0; r < size; ++r) expected += contribution(r, n, dtype).to(torch::kDouble);
      std::vector<at::Tensor> summed(size), scattered(size), averaged(size);
      run_on_threads(size, [&](int r) {
        summed[r] = contribution(r, n, dtype);
        ranks[r]->all_reduce(summed[r], ReduceOp::kSum)->wait();
        scattered[r] = torch::empty({chunk}, dtype);
        ranks[r]->reduce_scatter(contribution(r, n, dtype), scattered[r], ReduceOp::kSum)->wait();
        averaged[r] = contribution(r, n, dtype);
        ranks[r]->all_reduce(averaged[r], ReduceOp::kAvg, {.async = false});
      });
      for (int r = 0; r < size; ++r) {
        SCOPED_TRACE("size " + std::to_string(size) + " rank " + std::to_string(r));
        EXPECT_TRUE(summed[r].to(torch::kDouble).equal(expected));
        EXPECT_TRUE(scattered[r].to(torch::kDouble).equal(expected.narrow(0, r * chunk, chunk)));
        at::Tensor avg = at::isFloatingType(dtype) ? (expected / size).to(dtype) : at::div(expected.to(torch::kLong), size, "trunc").to(dtype);
        EXPECT_TRUE(averaged[r].equal(avg));
      }
    }
  }
}

TEST(ThreadGroup, InPlaceAllGatherBroadcastAndAllToAll) {
  const int size = 3;
  auto ranks = make_thread_group(size);
  std::vector<at::Tensor> gathered(size), broadcast(size), exchanged(size);
  run_on_threads(size, [&](int r) {
    gathered[r] = torch::zeros({6});
    gathered[r].narrow(0, 2 * r, 2).fill_(r + 1);  // the shard lives inside the output
    ranks[r]->all_gather(gathered[r].narrow(0, 2 * r, 2), gathered[r])->wait();
    broadcast[r] = torch::full({4}, static_cast<double>(r));
    ranks[r]->broadcast(broadcast[r], 2)->wait();
    exchanged[r] = torch::empty({3});
    ranks[r]->all_to_all(torch::arange(3, torch::kFloat) + 10 * r, exchanged[r])->wait();
  });
  for (int r = 0; r < size; ++r) {
    EXPECT_TRUE(gathered[r].equal(torch::tensor({1., 1., 2., 2., 3., 3.}, torch::kFloat)));
    EXPECT_TRUE(broadcast[r].equal(torch::full({4}, 2.f)));
    // Chunk j of rank i's input lands in chunk i of rank j's output.
    EXPECT_TRUE(exchanged[r].equal(torch::tensor({0.f, 10.f, 20.f}) + r));
  }
}

TEST(ThreadGroup, CollectivesStayInFlightUntilEveryRankCalls) {
  auto ranks = make_thread_group(2);
  at::Tensor a0 = torch::ones({4}), b0 = torch::ones({4});
  auto first = ranks[0]->all_reduce(a0);
  auto second = ranks[0]->all_reduce(b0);
  EXPECT_FALSE(first->test());  // rank 1 has not called: two collectives in flight on rank 0
  EXPECT_FALSE(second->test());
  at::Tensor a1 = torch::full({4}, 2.f), b1 = torch::full({4}, 3.f);
  ranks[1]->all_reduce(a1)->wait();
  EXPECT_TRUE(first->test());
  EXPECT_FALSE(second->test());
  ranks[1]->all_reduce(b1)->wait();
  second->wait();
  EXPECT_TRUE(a0.equal(torch::full({4}, 3.f)));
  EXPECT_TRUE(b0.equal(torch::full({4}, 4.f)));
}

TEST(ThreadGroup, AMissingRankIsATimeoutErrorNamingIt) {
  auto ranks = make_thread_group(3, std::chrono::milliseconds(50));
  at::Tensor t = torch::ones({2});
  std::string message;
  run_on_threads(3, [&](int r) {
    if (r == 2) return;  // never calls
    try {
      ranks[r]->all_reduce(t.clone())->wait();
    } catch (const zero::Error& e) {
      if (r == 0) message = e.what();
    }
  });
  EXPECT_NE(message.find("rank(s) 2 never called it"), std::string::npos) << message;
}

TEST(ThreadGroup, MismatchedCollectivesFailOnEveryRank) {
  auto ranks = make_thread_group(2);
  std::vector<std::string> errors(2);
  run_on_threads(2, [&](int r) {
    try {
      if (r == 0) ranks[r]->all_reduce(torch::ones({4}))->wait();
      else ranks[r]->all_reduce(torch::ones({5}))->wait();
    } catch (const zero::Error& e) {
      errors[r] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("ranks disagree"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[0], errors[1]);
}

}  // namespace
