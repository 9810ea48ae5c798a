// zero::agree (include/zero/communicator.h).
#include <ATen/ATen.h>

#include <climits>
#include <string>

#include "zero/communicator.h"
#include "zero/error.h"

namespace zero {

void agree(Communicator& comm, const std::string& error, int rank, const std::string& what) {
  at::Tensor first = at::full({1}, error.empty() ? INT_MAX : rank, at::kInt);
  comm.all_reduce(first, ReduceOp::kMin, {.async = false});
  const int failed = first.item<int>();
  if (failed == INT_MAX) return;
  if (!error.empty()) throw Error(error, what, rank);
  throw Error(what + " failed on rank " + std::to_string(failed) + " (its error is printed there)", what, rank);
}

}  // namespace zero
