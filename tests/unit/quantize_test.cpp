// ZeRO++'s blockwise quantization (src/comm/quantize.h) against hand-computed codes and bounds.
#include "comm/quantize.h"
#include "zero/error.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace zero::comm_detail {
namespace {

float scale_of(const at::Tensor& message, int64_t code_bytes, int64_t block) {
  float s;
  std::memcpy(&s, message.data_ptr<uint8_t>() + code_bytes + block * 4, 4);
  return s;
}

TEST(Quantize, MessageSizes) {
  EXPECT_EQ(quantized_bytes(256, 8), 256 + 4);
  EXPECT_EQ(quantized_bytes(257, 8), 257 + 8);
  EXPECT_EQ(quantized_bytes(257, 4), 129 + 8);
  EXPECT_EQ(quantized_bytes(1, 4), 1 + 4);
  EXPECT_EQ(quantized_bytes(49568, 4), 24784 + 4 * 194);
  EXPECT_THROW(quantized_bytes(10, 3), Error);
}

// One block: 1, -0.6, 0.25, 0.7, then zeros. max|x| = 1, so the scale is 1/127 (int8) or 1/7
// (int4), and each code the integer nearest x / scale (no ties: they fall either way in float).
TEST(Quantize, HandComputedCodes) {
  at::Tensor x = at::zeros({256});
  x[0] = 1.0;
  x[1] = -0.6;
  x[2] = 0.25;
  x[3] = 0.7;
  at::Tensor m8 = quantize_blocks(x, 8);
  ASSERT_EQ(m8.numel(), 260);
  const auto* c8 = reinterpret_cast<const int8_t*>(m8.data_ptr<uint8_t>());
  EXPECT_EQ(c8[0], 127);
  EXPECT_EQ(c8[1], -76);  // -76.2
  EXPECT_EQ(c8[2], 32);  // 31.75
  EXPECT_EQ(c8[3], 89);  // 88.9
  EXPECT_EQ(c8[4], 0);
  EXPECT_FLOAT_EQ(scale_of(m8, 256, 0), 1.0f / 127);
  at::Tensor d8 = dequantize_blocks(m8, 256, 8);
  EXPECT_FLOAT_EQ(d8[1].item<float>(), -76.0f / 127);
  EXPECT_FLOAT_EQ(d8[3].item<float>(), 89.0f / 127);

  at::Tensor m4 = quantize_blocks(x, 4);
  ASSERT_EQ(m4.numel(), 128 + 4);
  const uint8_t* c4 = m4.data_ptr<uint8_t>();
  EXPECT_EQ(c4[0], 7 | (12 << 4));  // 7, then -4.2 -> -4 as a two's-complement nibble
  EXPECT_EQ(c4[1], 2 | (5 << 4));   // 1.75 -> 2, 4.9 -> 5
  EXPECT_EQ(c4[2], 0);
  EXPECT_FLOAT_EQ(scale_of(m4, 128, 0), 1.0f / 7);
  at::Tensor d4 = dequantize_blocks(m4, 256, 4);
  EXPECT_FLOAT_EQ(d4[0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(d4[1].item<float>(), -4.0f / 7);
  EXPECT_FLOAT_EQ(d4[3].item<float>(), 5.0f / 7);
}

// Every value decodes within half a step of its block's scale; sizes off the block, 16-bit input.
TEST(Quantize, RoundTripWithinHalfAStep) {
  at::manual_seed(3);
  for (int bits : {8, 4}) {
    for (int64_t n : {1, 255, 256, 1000, 4099}) {
      for (auto dtype : {at::kFloat, at::kBFloat16}) {
        at::Tensor x = (at::randn({n}) * at::linspace(0.01, 10, n)).to(dtype);
        at::Tensor y = dequantize_blocks(quantize_blocks(x, bits), n, bits);
        ASSERT_EQ(y.numel(), n);
        ASSERT_EQ(y.scalar_type(), at::kFloat);
        const int64_t blocks = (n + 255) / 256;
        at::Tensor padded = at::zeros({blocks * 256});
        padded.narrow(0, 0, n).copy_(x.to(at::kFloat));
        at::Tensor step = padded.view({blocks, 256}).abs().amax(1, true).div(bits == 8 ? 127.0 : 7.0);
        at::Tensor bound = step.expand({blocks, 256}).reshape(-1).narrow(0, 0, n) * 0.5 * (1 + 1e-5);
        EXPECT_TRUE(((y - x.to(at::kFloat)).abs() <= bound).all().item<bool>())
            << bits << " bits, n " << n << ", " << dtype;
      }
    }
  }
}

// fp16's overflow check reads reduced gradients: a block holding inf or NaN decodes non-finite,
// the other blocks as before; a block of zeros decodes to zeros.
TEST(Quantize, NonFiniteBlocksStayNonFinite) {
  for (int bits : {8, 4}) {
    for (double bad : {INFINITY, -INFINITY, NAN}) {
      at::Tensor x = at::ones({600});
      x.narrow(0, 256, 256).zero_();
      x[520] = bad;  // the third block
      at::Tensor y = dequantize_blocks(quantize_blocks(x, bits), 600, bits);
      EXPECT_TRUE(y.narrow(0, 0, 256).eq(1).all().item<bool>());
      EXPECT_TRUE(y.narrow(0, 256, 256).eq(0).all().item<bool>());
      EXPECT_FALSE(at::isfinite(y.narrow(0, 512, 88)).any().item<bool>()) << bits << " bits, " << bad;
    }
  }
}

TEST(Quantize, WrongMessageSizeIsAnError) {
  at::Tensor m = quantize_blocks(at::ones({300}), 8);
  EXPECT_THROW(dequantize_blocks(m, 301, 8), Error);
}

}  // namespace
}  // namespace zero::comm_detail
