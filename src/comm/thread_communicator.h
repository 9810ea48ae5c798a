// An in-process group of N ranks, one thread each: the same Communicator interface as MPI, so the
// reducer, the partitions and stage 3 can be unit-tested at 1-4 ranks in milliseconds, without
// mpirun. Test-only: it favours checking over speed.
//
//   auto ranks = zero::comm_detail::make_thread_group(3);
//   zero::comm_detail::run_on_threads(3, [&](int r) { ranks[r]->all_reduce(t[r])->wait(); });
//
// Collectives match by call order, as MPI's do. A call completes when every rank has made it: the
// last rank to arrive computes every rank's result (reductions accumulated in float64 or int64 and
// rounded once, like the MPI backend's 16-bit path) and wakes the others. Until then Work::test()
// is false, so tests can hold several collectives in flight. A rank that waits longer than the
// group's timeout gets a zero::Error naming the collective and the ranks that never called it,
// instead of a hang; ranks that call mismatched collectives all get the same error.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "zero/communicator.h"

namespace zero::comm_detail {

std::vector<std::unique_ptr<Communicator>> make_thread_group(
    int size, std::chrono::milliseconds timeout = std::chrono::milliseconds(10'000));

// Runs body(rank) on `size` threads and joins them; rethrows the first exception (lowest rank).
void run_on_threads(int size, const std::function<void(int rank)>& body);

}  // namespace zero::comm_detail
