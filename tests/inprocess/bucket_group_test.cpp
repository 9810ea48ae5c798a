// The bucket group's gradients (bucket.h) at stages 0-3 with 1-4 ranks as threads, against the sum over ranks and
// micro-steps computed here from each rank's known gradients. Parameters that get no gradient
// in some micro-steps (or never) must contribute zeros; the pooled buffers must stay within two.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "comm/thread_communicator.h"
#include "engine/flat_params.h"
#include "engine/bucket.h"
#include "zero/comm_stats.h"

using zero::engine::FlatParams;
using zero::engine::BucketGroup;
using zero::engine::ReducerOptions;

namespace {

const std::vector<std::vector<int64_t>> kReducerShapes = {{7, 3}, {5}, {4, 6}, {11}, {2, 9}, {13}};

// What rank r's backward produces for parameter i in micro-step m: small integers, exact in bf16.
at::Tensor gradient(int r, int m, size_t i) {
  const auto& shape = kReducerShapes[i];
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return ((torch::arange(n, torch::kLong) + 3 * r + 5 * m + 7 * static_cast<int64_t>(i)) % 9 - 4)
      .to(torch::kFloat)
      .reshape(shape);
}
// Parameter 3 never gets a gradient; parameter 2 only in even micro-steps.
bool used(size_t i, int m) { return i != 3 && !(i == 2 && m % 2 == 1); }

struct ReducerCase {
  int stage, ranks, accumulation;
  bool overlap;
  at::ScalarType dtype;
  std::string label() const {
    return "stage " + std::to_string(stage) + ", " + std::to_string(ranks) + " ranks, gas " +
           std::to_string(accumulation) + (overlap ? ", overlap" : "") + ", " + c10::toString(dtype);
  }
};

ReducerOptions options_for(const ReducerCase& c) {
  ReducerOptions o;
  o.gradients = c.stage >= 2 ? ReducerOptions::Gradients::kStreamedIntoShards : ReducerOptions::Gradients::kInBucketBuffers;
  o.whole_buckets = c.stage == 0;
  o.overlap = c.overlap;
  return o;
}

constexpr int kSteps = 2;  // two optimizer steps, zero() between: the second must not see the first

struct RankResult {
  std::vector<at::Tensor> owned;  // per step, averaged over ranks
  int64_t buckets = 0, completions = 0, pool_bytes = 0, largest_bucket_bytes = 0;
  zero::OpStats reduce_scatters, all_reduces;
};

RankResult run_rank(const ReducerCase& c, zero::Communicator& comm, int r) {
  std::vector<at::Tensor> params;
  std::vector<int> groups;
  for (size_t i = 0; i < kReducerShapes.size(); ++i) {
    params.push_back(torch::zeros(kReducerShapes[i], c.dtype).requires_grad_(true));
    groups.push_back(static_cast<int>(i / 2));  // stage 3: units of two parameters
  }
  const int partitions = c.stage == 0 ? 1 : c.ranks;
  FlatParams flat(params, partitions, c.stage == 3 ? zero::engine::kWholeGroupBucket : 40,
                  c.stage == 3 ? groups : std::vector<int>{});
  auto stats = std::make_shared<zero::CommStats>();
  zero::CountingCommunicator counted(comm, stats);
  BucketGroup reducer(flat, counted, options_for(c));
  RankResult out;
  for (int step = 0; step < kSteps; ++step) {
    for (int m = 0; m < c.accumulation; ++m) {
      const bool boundary = m == c.accumulation - 1;
      reducer.begin_backward(c.stage >= 2 || boundary);
      at::Tensor loss = torch::zeros({}, c.dtype);
      for (size_t i = 0; i < params.size(); ++i)
        if (used(i, m)) loss = loss + (params[i] * gradient(r, m + 10 * step, i).to(c.dtype)).sum();
      loss.backward();
      reducer.end_backward();
      out.pool_bytes = std::max(out.pool_bytes, reducer.staging_bytes());
    }
    out.owned.push_back(reducer.owned_gradients() * reducer.averaging_factor());
    reducer.zero();
  }
  out.completions = reducer.completions();
  out.buckets = static_cast<int64_t>(flat.layout().buckets().size());
  for (const auto& b : flat.layout().buckets())
    out.largest_bucket_bytes = std::max(out.largest_bucket_bytes, b.padded * static_cast<int64_t>(c10::elementSize(c.dtype)));
  out.reduce_scatters = stats->total(zero::CollectiveOp::kReduceScatter);
  out.all_reduces = stats->total(zero::CollectiveOp::kAllReduce);
  return out;
}

// The expected owned gradient, placed by the layout's fragments (not by the reducer's views).
at::Tensor expected_owned(const ReducerCase& c, int r, int step = 0) {
  std::vector<int64_t> numels;
  for (const auto& shape : kReducerShapes) numels.push_back(c10::multiply_integers(shape));
  std::vector<at::Tensor> params;
  std::vector<int> groups;
  for (size_t i = 0; i < kReducerShapes.size(); ++i) {
    params.push_back(torch::zeros(kReducerShapes[i], c.dtype).requires_grad_(true));
    groups.push_back(static_cast<int>(i / 2));
  }
  const int partitions = c.stage == 0 ? 1 : c.ranks;
  const int owner = c.stage == 0 ? 0 : r;
  FlatParams flat(params, partitions, c.stage == 3 ? zero::engine::kWholeGroupBucket : 40,
                  c.stage == 3 ? groups : std::vector<int>{});
  at::Tensor expected = torch::zeros({flat.layout().owned_numel()}, torch::kDouble);
  for (size_t i = 0; i < kReducerShapes.size(); ++i) {
    at::Tensor sum = torch::zeros({numels[i]}, torch::kDouble);
    for (int rank = 0; rank < c.ranks; ++rank)
      for (int m = 0; m < c.accumulation; ++m)
        if (used(i, m)) sum += gradient(rank, m + 10 * step, i).reshape(-1).to(torch::kDouble);
    if (auto f = flat.layout().fragment(static_cast<int>(i), owner)) {
      expected.narrow(0, f->owned_offset, f->param_end - f->param_begin)
          .copy_(sum.narrow(0, f->param_begin, f->param_end - f->param_begin));
    }
  }
  return expected / c.ranks;
}

TEST(BucketGroupGradients, MatchesTheLocalSumAtStagesZeroToThreeWithOneToFourRanks) {
  for (int stage = 0; stage <= 3; ++stage)
    for (int ranks = 1; ranks <= 4; ++ranks)
      for (int accumulation : {1, 2})
        for (bool overlap : {false, true})
          for (auto dtype : {at::kFloat, at::kBFloat16}) {
            const ReducerCase c{stage, ranks, accumulation, overlap, dtype};
            SCOPED_TRACE(c.label());
            auto group = zero::comm_detail::make_thread_group(ranks);
            std::vector<RankResult> results(static_cast<size_t>(ranks));
            zero::comm_detail::run_on_threads(ranks, [&](int r) { results[r] = run_rank(c, *group[r], r); });
            const int reducing = stage >= 2 ? accumulation : 1;
            for (int r = 0; r < ranks; ++r) {
              const RankResult& got = results[static_cast<size_t>(r)];
              // Sums of small integers over at most 4 ranks × 2 steps: exact in both dtypes; the
              // average divides by 1-4 (exact except by 3, one fp32 rounding).
              for (int step = 0; step < kSteps; ++step) {
                EXPECT_TRUE(torch::allclose(got.owned[step].to(torch::kDouble), expected_owned(c, r, step), 1e-7, 0))
                    << "rank " << r << " step " << step;
              }
              EXPECT_EQ(got.completions, got.buckets * reducing * kSteps);
              if (stage == 0) {
                EXPECT_EQ(got.all_reduces.calls, got.buckets * kSteps);
                EXPECT_EQ(got.reduce_scatters.calls, 0);
              } else {
                EXPECT_EQ(got.reduce_scatters.calls, got.buckets * reducing * kSteps);
                EXPECT_EQ(got.all_reduces.calls, 0);
              }
              if (stage >= 2) {
                EXPECT_GE(got.pool_bytes, got.largest_bucket_bytes);
                EXPECT_LE(got.pool_bytes, 2 * got.largest_bucket_bytes);  // the pool's bound
              } else {
                EXPECT_EQ(got.pool_bytes, 0);
              }
            }
          }
}

TEST(BucketGroupGradients, PredivideAndAWireDtypeKeepTheAverage) {
  for (int stage : {0, 1, 2}) {
    const ReducerCase c{stage, 4, 2, true, at::kFloat};
    SCOPED_TRACE(c.label());
    auto group = zero::comm_detail::make_thread_group(4);
    std::vector<at::Tensor> owned(4);
    zero::comm_detail::run_on_threads(4, [&](int r) {
      std::vector<at::Tensor> params;
      for (const auto& shape : kReducerShapes) params.push_back(torch::zeros(shape).requires_grad_(true));
      FlatParams flat(params, stage == 0 ? 1 : 4, 40);
      ReducerOptions o = options_for(c);
      o.prescale = true;
      o.predivide_factor = 2;
      o.wire_dtype = at::kBFloat16;  // small integers halved: still exact
      BucketGroup reducer(flat, *group[r], o);
      for (int m = 0; m < 2; ++m) {
        reducer.begin_backward(stage >= 2 || m == 1);
        at::Tensor loss = torch::zeros({});
        for (size_t i = 0; i < params.size(); ++i)
          if (used(i, m)) loss = loss + (params[i] * gradient(r, m, i)).sum();
        loss.backward();
        reducer.end_backward();
      }
      owned[r] = reducer.owned_gradients() * reducer.averaging_factor();
    });
    for (int r = 0; r < 4; ++r)
      EXPECT_TRUE(torch::allclose(owned[r].to(torch::kDouble), expected_owned(c, r), 1e-7, 0)) << "rank " << r;
  }
}

}  // namespace
