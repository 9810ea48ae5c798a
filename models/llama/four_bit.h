// QLoRA's frozen base in 4 bits, in bitsandbytes' format (docs/lora.md):
//   codes:  two 4-bit indices per byte, element 2k in the high nibble and 2k+1 in the low one,
//           into the NF4 table (the normal distribution's quantiles) or the FP4 one (1 sign, 2
//           exponent and 1 mantissa bit, scaled to [-1, 1]);
//   scales: one absmax per block of 64 elements (a code times its block's absmax is the value);
//   double quantization: the absmaxes less their mean (`offset`) in 8 bits, in blocks of 256,
//           through bitsandbytes' signed dynamic map, with one fp32 absmax per block of them.
// Quantizing picks the nearest code of x / absmax, a value halfway between two codes going to the
// lower one (bitsandbytes' bucketize over the codes' midpoints).
//
// Linear4bit computes x · dequantize(W)ᵀ + b and keeps only the codes for backward, where it
// dequantizes again (bitsandbytes' MatMul4Bit): the base costs its 4-bit bytes between forward
// and backward, not a 16-bit copy.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zero::llama {

enum class FourBitType { kNf4, kFp4 };

// "nf4" or "fp4" (bitsandbytes' bnb_4bit_quant_type); an error naming --bnb_4bit_quant_type otherwise.
FourBitType four_bit_type(const std::string& name);

// The 16 values of the code table, in index order (bitsandbytes' get_4bit_type, normalised to [-1, 1]).
const std::vector<float>& four_bit_codes(FourBitType type);
// bitsandbytes' create_dynamic_map(signed=True): 256 sorted values in [-1, 1], the 8-bit map of
// double quantization.
const std::vector<float>& dynamic_map();

inline constexpr int64_t kFourBitBlock = 64;       // elements per absmax
inline constexpr int64_t kDoubleQuantBlock = 256;  // absmaxes per second-level absmax

// A weight in 4 bits. Every tensor is flat; with double quantization `absmax` holds the 8-bit
// codes of the absmaxes (uint8) and `absmax2` and `offset` their scales, else `absmax` is fp32.
struct FourBitWeight {
  FourBitType type = FourBitType::kNf4;
  std::vector<int64_t> shape;
  at::Tensor codes;    // uint8 [ceil(numel / 2)]
  at::Tensor absmax;   // fp32 [blocks], or uint8 [blocks] with double quantization
  at::Tensor absmax2;  // fp32 [ceil(blocks / 256)] (double quantization)
  float offset = 0;    // the mean of the absmaxes (double quantization)
  bool double_quant() const { return absmax2.defined(); }
};

FourBitWeight quantize_4bit(const at::Tensor& weight, FourBitType type, bool double_quant);
// The absmax of every block (fp32), from the 8-bit codes when double-quantized.
at::Tensor block_absmax(const FourBitWeight& w);
// The weight again, code × absmax in fp32, then in `dtype`.
at::Tensor dequantize_4bit(const FourBitWeight& w, at::ScalarType dtype);
// As dequantize_4bit, from the tensors alone (the parameters a model registers them as).
at::Tensor dequantize_4bit(FourBitType type, const std::vector<int64_t>& shape, const at::Tensor& codes,
                           const at::Tensor& absmax, const at::Tensor& absmax2, float offset, at::ScalarType dtype);

// x · Wᵀ + b with W dequantized in x's dtype (bitsandbytes' bnb_4bit_compute_dtype is the
// activations'); backward dequantizes again for x's gradient (W is frozen: it gets none).
at::Tensor linear_4bit(const at::Tensor& x, FourBitType type, const std::vector<int64_t>& shape, const at::Tensor& codes,
                       const at::Tensor& absmax, const at::Tensor& absmax2, float offset, const at::Tensor& bias);

}  // namespace zero::llama
