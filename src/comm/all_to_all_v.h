// The checks every backend's Communicator::all_to_all_v makes on its own arguments.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace zero {
class Communicator;
}

namespace zero::comm_detail {

// An error naming the problem when the counts are not one non-negative number per rank, or do not
// add up to the tensors' elements, or the tensors are not contiguous alike.
void check_all_to_all_v(const Communicator& comm, const at::Tensor& input, const std::vector<int64_t>& send_counts,
                        const at::Tensor& output, const std::vector<int64_t>& receive_counts);

}  // namespace zero::comm_detail
