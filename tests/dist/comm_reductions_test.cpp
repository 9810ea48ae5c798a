// The communicator's reductions under mpirun -np 1..4 (and as a plain process): all-reduce and
// reduce-scatter in every op, dtype, size and mode, split into pieces, in flight together, and as
// exchanges (docs/communicator.md), against what comm_test_values.h computes locally.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm_test_values.h"
#include "dist_test_world.h"
#include "zero/communicator.h"

using namespace comm_test;

TEST(Collectives, AllReduceEveryOpAndDtype) {
  const int rank = comm().rank(), size = comm().size();
  for (const auto& mode : kModes) {
    for (auto dtype : kDtypes) {
      for (auto op : kOps) {
        for (int64_t n : kSizes) {
          at::Tensor t = contribution(rank, n, dtype);
          comm().all_reduce(t, op, mode)->wait();
          EXPECT_TRUE(t.equal(reference_reduce(size, n, dtype, op))) << label(dtype, op, n, mode);
        }
      }
    }
  }
}

TEST(Collectives, ReduceScatterEveryOpAndDtype) {
  const int rank = comm().rank(), size = comm().size();
  for (const auto& mode : kModes) {
    for (auto dtype : kDtypes) {
      for (auto op : kOps) {
        for (int64_t chunk : kSizes) {
          at::Tensor input = contribution(rank, chunk * size, dtype);
          at::Tensor output = torch::empty({chunk}, input.options());
          comm().reduce_scatter(input, output, op, mode)->wait();
          at::Tensor expected = reference_reduce(size, chunk * size, dtype, op).narrow(0, rank * chunk, chunk);
          EXPECT_TRUE(output.equal(expected)) << label(dtype, op, chunk, mode);
        }
      }
    }
  }
}

TEST(Collectives, ReduceScatterIntoOwnSliceOfTheInput) {
  // ZeRO's pattern: a gradient bucket reduced into this rank's slice of the same bucket.
  const int rank = comm().rank(), size = comm().size();
  const int64_t chunk = 13;
  for (const auto& mode : kModes) {
    at::Tensor bucket = contribution(rank, chunk * size, at::kFloat);
    at::Tensor slice = bucket.narrow(0, rank * chunk, chunk);
    comm().reduce_scatter(bucket, slice, ReduceOp::kSum, mode)->wait();
    EXPECT_TRUE(
        slice.equal(reference_reduce(size, chunk * size, at::kFloat, ReduceOp::kSum).narrow(0, rank * chunk, chunk)));
  }
}

TEST(Collectives, ReduceScatterIntoTheFirstRowOfTheInput) {
  // An output that overlaps the input as rank 0's own row but as a row other ranks still send
  // from: every rank must take the same path (MPI would match two different collectives), and
  // none may overwrite terms before they are sent. Many small pieces, several in flight.
  zero::World pieces_world = zero::World::from_environment({.reduction_piece_bytes = 16, .pieces_in_flight = 3});
  zero::Communicator& pc = pieces_world.communicator();
  const int rank = pc.rank(), size = pc.size();
  const int64_t chunk = 29;
  for (const auto& mode : kModes) {
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
      at::Tensor bucket = contribution(rank, chunk * size, dtype);
      at::Tensor first_row = bucket.narrow(0, 0, chunk);
      pc.reduce_scatter(bucket, first_row, ReduceOp::kSum, mode)->wait();
      EXPECT_TRUE(first_row.equal(reference_reduce(size, chunk * size, dtype, ReduceOp::kSum).narrow(0, rank * chunk, chunk)))
          << label(dtype, ReduceOp::kSum, chunk, mode);
    }
  }
}

namespace {

void reductions_split_into_pieces(bool exchanges) {
  zero::World pieces_world = zero::World::from_environment(
      {.reduction_piece_bytes = 16, .pieces_in_flight = 3, .exchange_reductions = exchanges});
  zero::Communicator& pc = pieces_world.communicator();
  const int rank = pc.rank(), size = pc.size();
  for (const auto& mode : kModes) {
    for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kChar, at::kLong}) {
      for (auto op : kOps) {
        for (int64_t n : {int64_t{0}, int64_t{3}, int64_t{37}}) {
          at::Tensor t = contribution(rank, n * 2, dtype).view({2, n});  // a 2-D tensor, flattened inside
          pc.all_reduce(t, op, mode)->wait();
          EXPECT_TRUE(t.view(-1).equal(reference_reduce(size, n * 2, dtype, op))) << label(dtype, op, n, mode);
          at::Tensor input = contribution(rank, n * size, dtype);
          at::Tensor output = torch::empty({n}, input.options());
          pc.reduce_scatter(input, output, op, mode)->wait();
          EXPECT_TRUE(output.equal(reference_reduce(size, n * size, dtype, op).narrow(0, rank * n, n)))
              << "reduce_scatter " << label(dtype, op, n, mode);
        }
      }
    }
    // The bucket-into-own-slice pattern, piece by piece.
    const int64_t chunk = 29;
    at::Tensor bucket = contribution(rank, chunk * size, at::kFloat);
    at::Tensor slice = bucket.narrow(0, rank * chunk, chunk);
    pc.reduce_scatter(bucket, slice, ReduceOp::kSum, mode)->wait();
    EXPECT_TRUE(
        slice.equal(reference_reduce(size, chunk * size, at::kFloat, ReduceOp::kSum).narrow(0, rank * chunk, chunk)));
  }
  // Test-driven progress of a many-piece all-reduce.
  at::Tensor t = contribution(rank, 1001, at::kFloat);
  auto work = pc.all_reduce(t, ReduceOp::kMax);
  while (!work->test()) {
  }
  EXPECT_TRUE(t.equal(reference_reduce(size, 1001, at::kFloat, ReduceOp::kMax)));
}

}  // namespace

TEST(Collectives, ReductionsSplitIntoPieces) {
  // Reductions are cut into pieces of reduction_piece_bytes (OpenMPI is slow on large ones);
  // 16-byte pieces make every size below span many, several of them in flight at once. Float32
  // and bfloat16 sums run as exchanges unless turned off: both ways.
  for (bool exchanges : {true, false}) {
    SCOPED_TRACE(exchanges ? "exchange reductions" : "MPI's reductions");
    reductions_split_into_pieces(exchanges);
  }
}

TEST(Collectives, ExchangeSumsAreInRankOrderAndTheSameBitsOnEveryRank) {
  // Random values, where the order of a float sum shows in its last bits: an all-reduce and a
  // reduce-scatter (sum and average, float32 and bfloat16) must equal rank 0's terms plus rank
  // 1's plus ..., in float32, rounded once; the all-reduce's result identical on every rank.
  // Small pieces, several in flight, and a length no rank count divides.
  // (Across nodes the hierarchical collectives sum each node's ranks first: docs/multinode.md.)
  if (test_world().num_nodes() > 1) GTEST_SKIP() << "hierarchical collectives sum node by node";
  zero::World pieces_world = zero::World::from_environment({.reduction_piece_bytes = 256, .pieces_in_flight = 3});
  zero::Communicator& pc = pieces_world.communicator();
  const int rank = pc.rank(), size = pc.size();
  const int64_t n = 3001;
  auto terms_of = [&](int r, at::ScalarType dtype) {
    auto generator = at::detail::createCPUGenerator(1000 + r);
    return at::randn({n}, generator, at::TensorOptions().dtype(at::kFloat)).to(dtype);
  };
  for (const auto& mode : kModes) {
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
      for (auto op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        at::Tensor in_order = terms_of(0, dtype).to(at::kFloat);
        for (int r = 1; r < size; ++r) in_order = in_order + terms_of(r, dtype).to(at::kFloat);
        if (op == ReduceOp::kAvg) in_order = in_order / size;
        const at::Tensor expected = in_order.to(dtype);
        at::Tensor t = terms_of(rank, dtype);
        pc.all_reduce(t, op, mode)->wait();
        EXPECT_TRUE(t.equal(expected)) << label(dtype, op, n, mode);
        at::Tensor gathered = torch::empty({n * size}, t.options());
        pc.all_gather(t, gathered)->wait();
        for (int r = 0; r < size; ++r) EXPECT_TRUE(gathered.narrow(0, r * n, n).equal(t)) << "rank " << r;
        const int64_t chunk = n / size;
        at::Tensor output = torch::empty({chunk}, t.options());
        pc.reduce_scatter(terms_of(rank, dtype).narrow(0, 0, chunk * size), output, op, mode)->wait();
        EXPECT_TRUE(output.equal(expected.narrow(0, rank * chunk, chunk))) << "reduce_scatter " << label(dtype, op, n, mode);
      }
    }
  }
}


TEST(Collectives, ManyPieceCollectivesInFlightStartInCallOrderOnEveryRank) {
  // Issue 13: each collective used to start its own later pieces as its earlier ones finished,
  // so two collectives in flight interleaved by each rank's timing and MPI matched one rank's
  // piece of A with another's piece of B (MPI_ERR_TRUNCATE, heap corruption, or silently mixed
  // sums). Here the ranks progress differently on purpose: even ranks finish A before calling
  // B, C and D; odd ranks call all four at once, D blocking while A's pieces are still queued.
  zero::World pieces_world = zero::World::from_environment({.reduction_piece_bytes = 64, .pieces_in_flight = 2});
  zero::Communicator& pc = pieces_world.communicator();
  const int rank = pc.rank(), size = pc.size();
  const int64_t chunk_a = 83, chunk_b = 41, n_c = 57, n_d = 5;
  at::Tensor in_a = contribution(rank, chunk_a * size, at::kFloat), out_a = torch::empty({chunk_a});
  at::Tensor in_b = contribution(rank, chunk_b * size, at::kBFloat16), out_b = torch::empty({chunk_b}, at::kBFloat16);
  at::Tensor in_c = contribution(rank, n_c, at::kFloat), out_c = torch::empty({n_c * size});
  at::Tensor d = contribution(rank, n_d, at::kFloat, 3);
  auto a = pc.reduce_scatter(in_a, out_a, ReduceOp::kSum);
  if (rank % 2 == 0) a->wait();
  auto b = pc.reduce_scatter(in_b, out_b, ReduceOp::kSum);
  auto c = pc.all_gather(in_c, out_c);
  pc.all_reduce(d, ReduceOp::kSum, {.async = false});
  c->wait();
  b->wait();
  a->wait();
  EXPECT_TRUE(out_a.equal(
      reference_reduce(size, chunk_a * size, at::kFloat, ReduceOp::kSum).narrow(0, rank * chunk_a, chunk_a)));
  EXPECT_TRUE(out_b.equal(
      reference_reduce(size, chunk_b * size, at::kBFloat16, ReduceOp::kSum).narrow(0, rank * chunk_b, chunk_b)));
  for (int r = 0; r < size; ++r) EXPECT_TRUE(out_c.narrow(0, r * n_c, n_c).equal(contribution(r, n_c, at::kFloat)));
  EXPECT_TRUE(d.equal(reference_reduce(size, n_d, at::kFloat, ReduceOp::kSum, 3)));
}

TEST(Collectives, LargeReductionsInBothModes) {
  // Over 1 MiB, the default piece size: several MPI calls per collective.
  const int rank = comm().rank(), size = comm().size();
  const int64_t chunk = (1 << 19) / size + 3;
  for (const auto& mode : kModes) {
    at::Tensor input = contribution(rank, chunk * size, at::kFloat);
    at::Tensor output = torch::empty({chunk});
    comm().reduce_scatter(input, output, ReduceOp::kAvg, mode)->wait();
    at::Tensor expected = reference_reduce(size, chunk * size, at::kFloat, ReduceOp::kAvg);
    EXPECT_TRUE(output.equal(expected.narrow(0, rank * chunk, chunk))) << (mode.async ? "async" : "blocking");
    comm().all_reduce(input, ReduceOp::kAvg, mode)->wait();
    EXPECT_TRUE(input.equal(expected)) << (mode.async ? "async" : "blocking");
  }
}

TEST(Collectives, SixteenBitSumsAccumulateInFloat32) {
  // 256 + 1 + 1 + ... summed in bfloat16 hop by hop stays 256 (its spacing there is 2);
  // accumulated in float32 and rounded once it does not.
  const int rank = comm().rank(), size = comm().size();
  at::Tensor t = torch::full({5}, rank == 0 ? 256.0 : 1.0, torch::kBFloat16);
  comm().all_reduce(t, ReduceOp::kSum)->wait();
  float exact = 256.0f + static_cast<float>(size - 1);
  EXPECT_EQ(t[0].item<float>(), torch::tensor(exact).to(torch::kBFloat16).item<float>());
}
