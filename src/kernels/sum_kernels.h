// The sum of a collective's terms (src/comm/mpi_communicator.cpp's exchange reductions), torch-free:
// `count` rows of n elements added element by element in the order given (rank order), in fp32,
// then divided by `divisor` (an average; 1: none) and stored, bf16 rounded once as LibTorch's
// float32 → bfloat16 copy rounds. `out` may be one of the rows (each element is read before its
// own is written).
#pragma once

#include <cstdint>

namespace zero::kernels {

void sum_rows(const float* const* rows, int count, int64_t n, float divisor, float* out);
void sum_rows_bf16(const uint16_t* const* rows, int count, int64_t n, float divisor, uint16_t* out);

}  // namespace zero::kernels
