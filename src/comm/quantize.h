// Blockwise symmetric quantization, ZeRO++'s wire format (qwZ: weights in int8, qgZ: gradients in
// int4). Every block of kQuantBlock values gets one float32 scale, max|x| / (2^(bits-1) - 1), and
// each value the integer nearest x / scale. A message is the codes (int4: two per byte, the
// earlier value in the low nibble), then the scales' bytes: one uint8 tensor, so it travels as
// one message through any backend.
//
// A block holding inf or NaN gets a non-finite scale and decodes to non-finite values, so a
// reduction of quantized gradients still shows fp16's overflow to the loss scaler.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace zero::comm_detail {

inline constexpr int64_t kQuantBlock = 256;

// Bytes of the message for `numel` values at `bits` (4 or 8).
int64_t quantized_bytes(int64_t numel, int bits);
// `values` (any float dtype, contiguous) as a uint8 message of quantized_bytes(numel, bits).
at::Tensor quantize_blocks(const at::Tensor& values, int bits);
// The values a message stands for, as float32 (numel elements).
at::Tensor dequantize_blocks(const at::Tensor& message, int64_t numel, int bits);

}  // namespace zero::comm_detail
