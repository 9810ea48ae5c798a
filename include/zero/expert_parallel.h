// Expert parallelism's exchange (docs/moe.md): DeepSpeed's AllToAllV — rows sent to the other
// ranks of a group in counts that differ per pair, and back.
//
//   at::Tensor counts = zero::expert_parallel::all_gather_counts(group, my_counts);  // every pair's
//   at::Tensor mine = zero::expert_parallel::exchange_rows(group, rows, send_counts, receive_counts);
//   ... each expert of this rank on its rows of `mine` ...
//   at::Tensor back = zero::expert_parallel::exchange_rows(group, results, receive_counts, send_counts);
//
// `rows` is [n, ...] with its first send_counts[0] rows for rank 0, the next send_counts[1] for
// rank 1, and so on; the result holds what every rank sent here, in rank order. The counts go
// first (every rank then knows every pair's), then the rows in one all-to-all with variable counts
// (Communicator::all_to_all_v: MPI_Alltoallv, the rows alone on the wire).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace zero {

class Communicator;

namespace expert_parallel {

// Collective over `group`: every rank's `counts` (int64, the same length on every rank), one row
// per rank: [ranks, counts.numel()].
at::Tensor all_gather_counts(Communicator& group, const at::Tensor& counts);

// Collective over `group`, differentiable in `rows`: its gradient goes back the way the rows came.
at::Tensor exchange_rows(Communicator& group, const at::Tensor& rows, const std::vector<int64_t>& send_counts,
                         const std::vector<int64_t>& receive_counts);

}  // namespace expert_parallel
}  // namespace zero
