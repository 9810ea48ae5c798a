// The communicator under mpirun -np 1..4 (and as a plain process, on the local backend): gathers,
// broadcasts, all-to-all, barriers, sub-communicators, the consistency checks and byte counts
// (its reductions: comm_reductions_test.cpp).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <functional>

#include "comm/quantize.h"
#include "comm/staging_pool.h"
#include "comm_test_values.h"
#include "dist_test_world.h"
#include "util/debug_buffers.h"
#include "zero/comm_stats.h"
#include "zero/error.h"

using namespace comm_test;

TEST(World, MatchesTheLauncher) {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(test_world().size(), size ? std::atoi(size) : 1);
  EXPECT_EQ(test_world().distributed(), size != nullptr);
  EXPECT_EQ(comm().backend(), size ? "mpi" : "local");
  EXPECT_EQ(comm().rank(), test_world().rank());
  if (const char* per_node = std::getenv("ZERO_RANKS_PER_NODE")) {
    int k = std::atoi(per_node);
    EXPECT_EQ(test_world().node(), test_world().rank() / k);
    EXPECT_EQ(test_world().local_rank(), test_world().rank() % k);
    EXPECT_EQ(test_world().num_nodes(), (test_world().size() + k - 1) / k);
  } else {
    EXPECT_EQ(test_world().num_nodes(), 1);  // every rank of these tests shares this machine
    EXPECT_EQ(test_world().local_size(), test_world().size());
    EXPECT_EQ(test_world().local_rank(), test_world().rank());
  }
}

TEST(Collectives, DebugBuffersNamesMemoryReleasedWhileInFlight) {
  // ZERO_DEBUG_BUFFERS=1 (the sanitizer run sets it): a piece whose buffer was released or moved
  // before it completed fails its collective instead of writing into freed memory unnoticed.
  if (!zero::debug_buffers()) GTEST_SKIP() << "ZERO_DEBUG_BUFFERS is not set";
  if (comm().backend() != "mpi") GTEST_SKIP() << "the local backend completes at once";
  // Not yet for the exchanges across nodes: their messages are not checked in place.
  if (test_world().num_nodes() > 1) GTEST_SKIP() << "hierarchical collectives: no buffer check yet";
  const int rank = comm().rank(), size = comm().size();
  at::Tensor input = contribution(rank, 1000, at::kFloat), output = torch::empty({1000 * size});
  auto work = comm().all_gather(input, output);
  // What stage 3's release does to a unit's storage; the old bytes stay allocated here, so the
  // collective still lands in valid memory and only the check can tell.
  c10::DataPtr old = output.storage().unsafeGetStorageImpl()->set_data_ptr(
      c10::GetAllocator(c10::DeviceType::CPU)->allocate(output.nbytes()));
  try {
    work->wait();
    ADD_FAILURE() << "the moved buffer was not reported";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("released or moved while MPI still used it"), std::string::npos) << e.what();
  }
}

TEST(Collectives, AllGatherEveryDtype) {
  const int rank = comm().rank(), size = comm().size();
  for (const auto& mode : kModes) {
    for (auto dtype : kDtypes) {
      for (int64_t n : kSizes) {
        at::Tensor input = contribution(rank, n, dtype);
        at::Tensor output = torch::empty({n * size}, input.options());
        comm().all_gather(input, output, mode)->wait();
        for (int r = 0; r < size; ++r) {
          EXPECT_TRUE(output.narrow(0, r * n, n).equal(contribution(r, n, dtype)))
              << label(dtype, ReduceOp::kSum, n, mode);
        }
      }
    }
  }
}

TEST(Collectives, AllGatherInPlace) {
  // The input is this rank's chunk of the output already (ZeRO's parameter all-gather).
  const int rank = comm().rank(), size = comm().size();
  const int64_t n = 9;
  for (const auto& mode : kModes) {
    at::Tensor flat = torch::zeros({n * size}, torch::kBFloat16);
    flat.narrow(0, rank * n, n).copy_(contribution(rank, n, at::kBFloat16));
    comm().all_gather(flat.narrow(0, rank * n, n), flat, mode)->wait();
    for (int r = 0; r < size; ++r) EXPECT_TRUE(flat.narrow(0, r * n, n).equal(contribution(r, n, at::kBFloat16)));
  }
}

TEST(Collectives, BroadcastFromEveryRoot) {
  const int rank = comm().rank(), size = comm().size();
  for (const auto& mode : kModes) {
    for (auto dtype : kDtypes) {
      for (int root = 0; root < size; ++root) {
        at::Tensor t = contribution(rank, 7, dtype);
        comm().broadcast(t, root, mode)->wait();
        EXPECT_TRUE(t.equal(contribution(root, 7, dtype))) << c10::toString(dtype) << " root " << root;
      }
    }
  }
}

TEST(Collectives, AllToAll) {
  const int rank = comm().rank(), size = comm().size();
  const int64_t chunk = 5;
  for (const auto& mode : kModes) {
    for (auto dtype : kDtypes) {
      // Chunk j of rank i's input holds contribution(i, chunk, offset = j * chunk).
      at::Tensor input = contribution(rank, chunk * size, dtype);
      at::Tensor output = torch::empty_like(input);
      comm().all_to_all(input, output, mode)->wait();
      for (int i = 0; i < size; ++i) {
        EXPECT_TRUE(output.narrow(0, i * chunk, chunk).equal(contribution(i, chunk, dtype, rank * chunk)))
            << c10::toString(dtype);
      }
    }
  }
}

// Variable counts: rank i sends (i + j) % 3 elements to rank j — none to some — its values
// i·100 + j·10 + k, and the default (padded) path of the base class gives the same.
TEST(Collectives, AllToAllWithVariableCounts) {
  const int rank = comm().rank(), size = comm().size();
  const auto count = [](int from, int to) { return static_cast<int64_t>((from + to) % 3); };
  std::vector<int64_t> send_counts, receive_counts;
  std::vector<float> values, expected;
  for (int j = 0; j < size; ++j) {
    send_counts.push_back(count(rank, j));
    receive_counts.push_back(count(j, rank));
    for (int64_t k = 0; k < count(rank, j); ++k) values.push_back(static_cast<float>(rank * 100 + j * 10 + k));
    for (int64_t k = 0; k < count(j, rank); ++k) expected.push_back(static_cast<float>(j * 100 + rank * 10 + k));
  }
  const at::Tensor input = torch::tensor(values, torch::kFloat), want = torch::tensor(expected, torch::kFloat);
  for (const auto& mode : kModes) {
    at::Tensor output = torch::full({static_cast<int64_t>(expected.size())}, -1.0f);
    comm().all_to_all_v(input, send_counts, output, receive_counts, mode)->wait();
    EXPECT_TRUE(output.equal(want)) << output;
    at::Tensor padded = torch::full_like(output, -1.0f);
    comm().zero::Communicator::all_to_all_v(input, send_counts, padded, receive_counts, mode)->wait();
    EXPECT_TRUE(padded.equal(want)) << padded;
  }
  // Counts that do not add up to the tensors: an error naming the numbers, on every rank.
  at::Tensor wrong = torch::empty({static_cast<int64_t>(expected.size()) + 1});
  EXPECT_THROW(comm().all_to_all_v(input, send_counts, wrong, receive_counts)->wait(), zero::Error);
}

TEST(Collectives, BarrierAndTest) {
  auto work = comm().barrier();
  while (!work->test()) {
  }
  EXPECT_EQ(work->error(), "");
  work->wait();  // waiting again on a finished work is fine
  auto blocking = comm().barrier({.async = false});
  EXPECT_TRUE(blocking->test());  // already complete when it returns
}

TEST(Collectives, TwoOpsInFlight) {
  const int rank = comm().rank(), size = comm().size();
  at::Tensor a = contribution(rank, 1031, at::kFloat);
  at::Tensor gathered = torch::empty({7 * size}, torch::kLong);
  at::Tensor b = contribution(rank, 7, at::kLong);
  auto first = comm().all_reduce(a, ReduceOp::kMax);
  auto second = comm().all_gather(b, gathered);
  second->wait();  // finish in the other order
  first->wait();
  EXPECT_TRUE(a.equal(reference_reduce(size, 1031, at::kFloat, ReduceOp::kMax)));
  for (int r = 0; r < size; ++r) EXPECT_TRUE(gathered.narrow(0, r * 7, 7).equal(contribution(r, 7, at::kLong)));
}

TEST(Collectives, SubCommunicators) {
  zero::World& world = test_world();
  auto node = world.intra_node();
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->size(), world.local_size());
  EXPECT_EQ(node->rank(), world.local_rank());
  auto across = world.inter_node();
  ASSERT_NE(across, nullptr);
  EXPECT_EQ(across->rank(), world.node());
  // Sum of world ranks over the group {0, last}.
  auto edges = world.group({0, world.size() - 1});
  bool member = world.rank() == 0 || world.rank() == world.size() - 1;
  ASSERT_EQ(edges != nullptr, member);
  if (edges) {
    at::Tensor t = torch::full({3}, world.rank(), torch::kInt);
    edges->all_reduce(t, ReduceOp::kSum)->wait();
    int expected = world.size() == 1 ? 0 : world.size() - 1;
    EXPECT_EQ(t[2].item<int>(), expected);
  }
  EXPECT_THROW(world.group({0, world.size()}), zero::Error);
}

TEST(Collectives, CountingDecoratorMeasuresBytes) {
  auto stats = std::make_shared<zero::CommStats>();
  zero::CountingCommunicator counted(comm(), stats);
  const int size = comm().size();
  const double n = size;
  at::Tensor grads = torch::ones({1000}, torch::kFloat);
  counted.all_reduce(grads, ReduceOp::kSum)->wait();
  counted.all_reduce(grads, ReduceOp::kSum)->wait();
  at::Tensor shard = torch::empty({250}, torch::kBFloat16);
  at::Tensor full = torch::zeros({250 * size}, torch::kBFloat16);
  counted.reduce_scatter(full, shard, ReduceOp::kSum)->wait();
  counted.all_gather(shard, full)->wait();
  counted.barrier()->wait();

  zero::OpStats ar = stats->total(zero::CollectiveOp::kAllReduce);
  EXPECT_EQ(ar.calls, 2);
  EXPECT_EQ(ar.elements, 2000);
  EXPECT_EQ(ar.message_bytes, 8000);
  EXPECT_DOUBLE_EQ(ar.bus_bytes, 2 * 2 * (n - 1) / n * 4000);
  EXPECT_GT(ar.seconds, 0);
  zero::OpStats rs = stats->total(zero::CollectiveOp::kReduceScatter);
  EXPECT_EQ(rs.message_bytes, 500 * size);
  EXPECT_DOUBLE_EQ(rs.bus_bytes, (n - 1) / n * 500 * size);
  zero::OpStats ag = stats->total(zero::CollectiveOp::kAllGather);
  EXPECT_EQ(ag.elements, 250 * size);
  EXPECT_DOUBLE_EQ(ag.bus_bytes, (n - 1) / n * 500 * size);
  EXPECT_EQ(stats->total(zero::CollectiveOp::kBarrier).calls, 1);
  EXPECT_EQ(stats->by_size().size(), 4u);  // one message size per op
}

// Mismatches: every rank must get an error (no hang), naming what differs.
class Mismatch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (comm().size() == 1) GTEST_SKIP() << "needs two or more ranks";
  }
  template <typename F>
  std::string error_of(F&& f) {
    try {
      f();
    } catch (const zero::Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(Mismatch, SizeDiffers) {
  const int rank = comm().rank();
  at::Tensor t = torch::ones({10 + rank}, torch::kFloat);
  std::string e = error_of([&] { comm().all_reduce(t, ReduceOp::kSum)->wait(); });
  EXPECT_NE(e.find("all_reduce: ranks disagree on the size: this rank has " + std::to_string(10 + rank) + " elements"),
            std::string::npos)
      << e;
}

TEST_F(Mismatch, DtypeDiffers) {
  at::Tensor t = torch::ones({4}, comm().rank() == 0 ? torch::kFloat : torch::kDouble);
  std::string e = error_of([&] { comm().broadcast(t, 0)->wait(); });
  EXPECT_NE(e.find("broadcast: ranks disagree on the dtype"), std::string::npos) << e;
}

TEST_F(Mismatch, CollectiveDiffers) {
  at::Tensor t = torch::ones({4}, torch::kFloat);
  std::string e = error_of([&] {
    if (comm().rank() == 0) {
      comm().broadcast(t, 0)->wait();
    } else {
      comm().all_reduce(t, ReduceOp::kSum)->wait();
    }
  });
  EXPECT_NE(e.find("ranks are not calling the same collective"), std::string::npos) << e;
}

TEST_F(Mismatch, RootAndReduceOpDiffer) {
  at::Tensor t = torch::ones({4}, torch::kFloat);
  std::string e = error_of([&] { comm().broadcast(t, comm().rank() == 0 ? 0 : 1)->wait(); });
  EXPECT_NE(e.find("disagree on the root"), std::string::npos) << e;
  e = error_of([&] { comm().all_reduce(t, comm().rank() == 0 ? ReduceOp::kSum : ReduceOp::kMax)->wait(); });
  EXPECT_NE(e.find("disagree on the reduce op"), std::string::npos) << e;
}

TEST_F(Mismatch, OneRankWithABadOutputStopsEveryRank) {
  const int rank = comm().rank(), size = comm().size();
  at::Tensor input = torch::ones({6}, torch::kFloat);
  at::Tensor output = torch::empty({6 * size + (rank == 1 ? 1 : 0)}, torch::kFloat);
  std::string e = error_of([&] { comm().all_gather(input, output)->wait(); });
  if (rank == 1) {
    EXPECT_NE(e.find("all_gather: output float32[" + std::to_string(6 * size + 1) + "] must have " +
                     std::to_string(size) + "x the elements of input float32[6]"),
              std::string::npos)
        << e;
  } else {
    EXPECT_NE(e.find("all_gather: rank 1 passed invalid arguments"), std::string::npos) << e;
  }
  // The communicator still works afterwards.
  at::Tensor t = torch::ones({3}, torch::kFloat);
  comm().all_reduce(t, ReduceOp::kSum)->wait();
  EXPECT_EQ(t[0].item<float>(), size);
}

TEST(LocalChecks, BadArgumentsAreClearErrors) {
  at::Tensor t = torch::ones({4, 4}, torch::kFloat).t();  // not contiguous
  EXPECT_THROW(comm().all_reduce(t, ReduceOp::kSum), zero::Error);
  at::Tensor b = torch::ones({4}, torch::kBool);
  try {
    comm().all_reduce(b, ReduceOp::kSum);
    FAIL();
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("dtype Bool"), std::string::npos) << e.what();
  }
  at::Tensor x = torch::ones({4}, torch::kFloat);
  EXPECT_THROW(comm().broadcast(x, comm().size()), zero::Error);
}

TEST(StagingPool, ReusesItsBuffers) {
  auto pool = std::make_shared<zero::comm_detail::StagingPool>();
  {
    at::Tensor a = pool->acquire(1000, at::kFloat);  // 4000 bytes, rounded up to 4032
    EXPECT_EQ(a.numel(), 1000);
    EXPECT_EQ(a.scalar_type(), at::kFloat);
    EXPECT_EQ(pool->bytes_held(), 4032);
  }
  for (int i = 0; i < 10; ++i) {
    at::Tensor again = pool->acquire(500, at::kBFloat16);  // fits the returned buffer: nothing new
    again.fill_(1);
  }
  EXPECT_EQ(pool->bytes_held(), 4032);
  at::Tensor first = pool->acquire(1000, at::kFloat);
  at::Tensor second = pool->acquire(10, at::kLong);  // the only free buffer is in use: a new one
  EXPECT_EQ(pool->bytes_held(), 4032 + 128);
  EXPECT_NE(first.data_ptr(), second.data_ptr());
}

// Across nodes every collective counts the bytes that leave this rank's node, and they are the
// least that must: a reduce-scatter or all-gather of N chunks of c floats sends (H-1)·c·4 bytes
// across nodes from each rank with H equal nodes; with unequal nodes every chunk goes straight
// to its owner (c·4 bytes to each rank on another node).
TEST(Collectives, InterNodeBytesAreExact) {
  zero::World& world = test_world();
  zero::Communicator& c = comm();
  for (int r = 0; r < world.size(); ++r) EXPECT_FALSE(world.host(r).empty());
  EXPECT_NE(world.describe_rank(0).find("rank 0 (host "), std::string::npos);
  if (world.num_nodes() == 1) {
    GTEST_SKIP() << "one node: " << (world.distributed() ? "MPI's own collectives" : "no traffic");
  }
  const int n = world.size();
  std::vector<int> per_node(static_cast<size_t>(world.num_nodes()), 0);
  for (int r = 0; r < n; ++r) ++per_node[static_cast<size_t>(world.node_of(r))];
  const bool equal = std::all_of(per_node.begin(), per_node.end(), [&](int k) { return k == per_node[0]; });
  const int off_node = n - world.local_size();
  const int64_t peers = equal ? world.num_nodes() - 1 : off_node;  // off-node ranks this rank sends to
  const int64_t chunk = 1031;
  auto sent = [&](const std::function<void()>& collective) {
    const int64_t before = c.inter_node_bytes();
    collective();
    return c.inter_node_bytes() - before;
  };
  at::Tensor input = contribution(world.rank(), chunk * n, at::kFloat), output = torch::empty({chunk}, torch::kFloat);
  EXPECT_EQ(sent([&] { c.reduce_scatter(input, output, ReduceOp::kSum)->wait(); }), peers * chunk * 4);
  EXPECT_TRUE(output.equal(reference_reduce(n, chunk * n, at::kFloat, ReduceOp::kSum).narrow(0, world.rank() * chunk, chunk)));
  // 16-bit gradients travel as they are within the node and as float32 partial sums across nodes.
  at::Tensor half_input = input.to(at::kBFloat16), half_output = torch::empty({chunk}, at::kBFloat16);
  EXPECT_EQ(sent([&] { c.reduce_scatter(half_input, half_output, ReduceOp::kSum)->wait(); }), peers * chunk * 4);
  at::Tensor gathered = torch::empty({chunk * n}, at::kBFloat16);
  EXPECT_EQ(sent([&] { c.all_gather(half_output, gathered)->wait(); }), peers * chunk * 2);
  // ZeRO++: a quantized all-gather moves each rank's int8 message; a quantized reduce-scatter
  // moves the int4 messages of the partial sums across nodes (equal nodes) or of every chunk.
  using zero::comm_detail::quantized_bytes;
  EXPECT_EQ(sent([&] { c.all_gather(half_output, gathered, {.quantize_bits = 8})->wait(); }),
            peers * quantized_bytes(chunk, 8));
  EXPECT_EQ(sent([&] { c.reduce_scatter(input, output, ReduceOp::kSum, {.quantize_bits = 4})->wait(); }),
            peers * quantized_bytes(chunk, 4));
  // An all-reduce is both, through n rows of ceil(numel / n).
  at::Tensor values = contribution(world.rank(), 1000, at::kFloat);
  const int64_t row = (1000 + n - 1) / n;
  EXPECT_EQ(sent([&] { c.all_reduce(values, ReduceOp::kSum)->wait(); }), 2 * peers * row * 4);
  EXPECT_TRUE(values.equal(reference_reduce(n, 1000, at::kFloat, ReduceOp::kSum)));
  // A broadcast: the root sends once to each other node (or, unequal, to each off-node rank).
  at::Tensor message = torch::full({500}, world.rank(), torch::kInt);
  const int64_t broadcast = sent([&] { c.broadcast(message, 0)->wait(); });
  EXPECT_EQ(broadcast, world.rank() == 0 ? peers * 500 * 4 : 0);
  EXPECT_TRUE(message.equal(torch::zeros({500}, torch::kInt)));
  // All-to-all: chunk j straight to rank j.
  at::Tensor from = contribution(world.rank(), 6 * n, at::kFloat), to = torch::empty({6 * n}, torch::kFloat);
  EXPECT_EQ(sent([&] { c.all_to_all(from, to)->wait(); }), static_cast<int64_t>(off_node) * 6 * 4);
  // With variable counts (expert parallelism's exchange): exactly the elements sent off the node,
  // here 1 + (this rank + peer) % 4 to each peer.
  std::vector<int64_t> out_counts, in_counts;
  int64_t off_node_elements = 0, outgoing = 0, incoming = 0;
  for (int r = 0; r < n; ++r) {
    out_counts.push_back(1 + (world.rank() + r) % 4);
    in_counts.push_back(1 + (r + world.rank()) % 4);
    outgoing += out_counts.back();
    incoming += in_counts.back();
    if (world.node_of(r) != world.node()) off_node_elements += out_counts.back();
  }
  at::Tensor rows = torch::ones({outgoing}), landed = torch::empty({incoming});
  EXPECT_EQ(sent([&] { c.all_to_all_v(rows, out_counts, landed, in_counts)->wait(); }), off_node_elements * 4);
  EXPECT_TRUE(landed.equal(torch::ones({incoming})));
}
