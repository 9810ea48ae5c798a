// Local checks every backend runs before a collective: they need no communication and name the
// op, the tensor and the sizes in their errors.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "zero/communicator.h"

namespace zero::comm_detail {

// Contiguous, a supported dtype, and (when `require_cpu`) on the CPU.
void check_tensor(CollectiveOp op, const char* role, const at::Tensor& t, bool require_cpu, int rank);
// Same dtype for input and output; output.numel() == input.numel() * out_factor / in_factor.
void check_pair(CollectiveOp op, const at::Tensor& input, const at::Tensor& output, int64_t in_factor,
                int64_t out_factor, bool require_cpu, int rank);
void check_root(int root, int size, int rank);
bool is_16bit_float(const at::Tensor& t);
std::string describe(const at::Tensor& t);    // "float32[1024]"
std::string dtype_name(at::ScalarType type);  // "float32", "bfloat16", ...
// Whether the bytes of `a` and `b` overlap (MPI forbids overlapping send and receive buffers).
bool overlaps(const at::Tensor& a, const at::Tensor& b);
// For ReduceOp::kAvg, divides the summed `buffer` by `size` (integers truncate, as NCCL's do).
void divide_for_average(at::Tensor& buffer, ReduceOp op, int size);

}  // namespace zero::comm_detail
