// What every rank contributes in the communicator's tests (comm_test.cpp,
// comm_reductions_test.cpp) and what a reduction of it must come to, computed locally.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "dist_test_world.h"
#include "zero/communicator.h"

namespace comm_test {

using zero::ReduceOp;

inline const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                             at::kChar,  at::kByte,   at::kInt,  at::kLong};
inline const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
// Non-blocking (MPI_I*) and blocking collectives must agree.
inline const std::vector<zero::CollectiveOptions> kModes = {{.async = true}, {.async = false}};
// 1 and 7 do not divide evenly by 2, 3 or 4 ranks; 1031 is prime.
inline const std::vector<int64_t> kSizes = {0, 1, 7, 1031};

inline zero::Communicator& comm() { return test_world().communicator(); }

// What rank r contributes: small integers (exact in every dtype), non-negative for uint8.
inline at::Tensor contribution(int r, int64_t n, at::ScalarType dtype, int64_t offset = 0) {
  auto i = torch::arange(offset, offset + n, torch::kLong);
  auto v = (i * 3 + r * 7) % 11;
  if (dtype != at::kByte) v = v - 5;
  return v.to(dtype);
}

// The reduction as it must come out: accumulate in float64 (or int64), average, cast once.
inline at::Tensor reference_reduce(int size, int64_t n, at::ScalarType dtype, ReduceOp op, int64_t offset = 0) {
  bool floating = at::isFloatingType(dtype);
  auto wide = floating ? torch::kDouble : torch::kLong;
  at::Tensor acc;
  for (int r = 0; r < size; ++r) {
    auto c = contribution(r, n, dtype, offset).to(wide);
    if (r == 0) {
      acc = c;
    } else if (op == ReduceOp::kMax) {
      acc = torch::maximum(acc, c);
    } else if (op == ReduceOp::kMin) {
      acc = torch::minimum(acc, c);
    } else {
      acc = acc + c;
    }
  }
  if (op == ReduceOp::kAvg) acc = floating ? acc / size : torch::div(acc, size, "trunc");
  return acc.to(dtype);
}

inline std::string label(at::ScalarType dtype, ReduceOp op, int64_t n, const zero::CollectiveOptions& mode) {
  return std::string(c10::toString(dtype)) + " " + zero::to_string(op) + " n=" + std::to_string(n) +
         (mode.async ? " async" : " blocking");
}

}  // namespace comm_test
