#include "comm/quantize.h"

#include <ATen/ATen.h>

#include "zero/error.h"

namespace zero::comm_detail {
namespace {

int64_t blocks(int64_t numel) { return (numel + kQuantBlock - 1) / kQuantBlock; }
int64_t code_bytes(int64_t numel, int bits) { return (numel * bits + 7) / 8; }
double largest_code(int bits) { return bits == 4 ? 7.0 : 127.0; }

void check_bits(int bits) {
  if (bits != 4 && bits != 8) throw Error("quantization to " + std::to_string(bits) + " bits (4 or 8)", "quantize");
}

}  // namespace

int64_t quantized_bytes(int64_t numel, int bits) {
  check_bits(bits);
  return code_bytes(numel, bits) + blocks(numel) * static_cast<int64_t>(sizeof(float));
}

at::Tensor quantize_blocks(const at::Tensor& values, int bits) {
  check_bits(bits);
  const int64_t n = values.numel(), nb = blocks(n);
  at::Tensor x = at::zeros({nb * kQuantBlock}, values.options().dtype(at::kFloat));
  x.narrow(0, 0, n).copy_(values.reshape(-1));
  x = x.view({nb, kQuantBlock});
  const double top = largest_code(bits);
  at::Tensor scales = x.abs().amax(1, /*keepdim=*/true).div_(top);
  // Note: an all-zero block has scale 0 (its codes are 0); inf or NaN makes the scale non-finite,
  // which the codes' 0 turns back into NaN on decoding (0 × inf).
  at::Tensor inverse = at::where(scales > 0, scales.reciprocal(), at::zeros_like(scales));
  at::Tensor codes = at::nan_to_num(x * inverse, 0.0, top, -top).round_().clamp_(-top, top).to(at::kChar).view(-1);
  at::Tensor message = at::empty({quantized_bytes(n, bits)}, values.options().dtype(at::kByte));
  at::Tensor code_part = message.narrow(0, 0, code_bytes(n, bits));
  if (bits == 8) {
    code_part.copy_(codes.narrow(0, 0, n).view(at::kByte));
  } else {
    // Two's-complement nibbles: value 2i in the low half of byte i, 2i+1 in the high half.
    at::Tensor nibbles = codes.narrow(0, 0, 2 * code_part.numel()).to(at::kShort).bitwise_and_(0xF).view({-1, 2});
    code_part.copy_(nibbles.select(1, 0).bitwise_or(nibbles.select(1, 1).bitwise_left_shift(4)));
  }
  message.narrow(0, code_part.numel(), nb * static_cast<int64_t>(sizeof(float))).copy_(scales.view(-1).view(at::kByte));
  return message;
}

at::Tensor dequantize_blocks(const at::Tensor& message, int64_t numel, int bits) {
  if (message.numel() != quantized_bytes(numel, bits)) {
    throw Error("a quantized message of " + std::to_string(message.numel()) + " bytes for " + std::to_string(numel) +
                    " values (" + std::to_string(quantized_bytes(numel, bits)) + " expected)",
                "quantize");
  }
  const int64_t nb = blocks(numel), nc = code_bytes(numel, bits);
  // The scales' bytes may sit at any offset: a copy aligns them.
  at::Tensor scales = message.narrow(0, nc, nb * static_cast<int64_t>(sizeof(float))).clone().view(at::kFloat);
  at::Tensor codes;
  if (bits == 8) {
    codes = message.narrow(0, 0, nc).view(at::kChar).to(at::kFloat);
  } else {
    at::Tensor bytes = message.narrow(0, 0, nc).to(at::kShort);
    // Sign-extend each nibble: (v ^ 8) - 8.
    at::Tensor low = bytes.bitwise_and(0xF).bitwise_xor_(8).sub_(8);
    at::Tensor high = bytes.bitwise_right_shift(4).bitwise_xor_(8).sub_(8);
    codes = at::stack({low, high}, 1).view(-1).narrow(0, 0, numel).to(at::kFloat);
  }
  at::Tensor padded = at::zeros({nb * kQuantBlock}, codes.options());
  padded.narrow(0, 0, numel).copy_(codes);
  return padded.view({nb, kQuantBlock}).mul_(scales.view({nb, 1})).view(-1).narrow(0, 0, numel);
}

}  // namespace zero::comm_detail
