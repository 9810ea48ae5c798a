// QLoRA's 4-bit base (models/llama/four_bit.h) against a hand computation from bitsandbytes'
// published format: its NF4 and FP4 code tables (functional.get_4bit_type), blocks of 64 values
// scaled by their absmax, the nearest code (a tie to the lower), two codes a byte with the first
// in the high nibble, and double quantization (the absmaxes less their mean, in 8 bits through
// create_dynamic_map's table, 256 to a block). The expected values are computed here, element by
// element, with a linear search, not with the library's bucketize.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

#include "models/llama/four_bit.h"

namespace {

using zero::llama::FourBitType;

// bitsandbytes' tables as published (functional.py, get_4bit_type), before normalisation.
const std::vector<double> kNf4 = {-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                                  -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                                  0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                                  0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0};
const std::vector<double> kFp4 = {0, 0.0625, 8, 12, 4, 6, 2, 3, -0.0, -0.0625, -8, -12, -4, -6, -2, -3};

// The index of the code nearest `v` (the lower value on a tie), by a linear search.
int nearest(float v, const std::vector<float>& codes) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(codes.size()); ++i) {
    if (best < 0) {
      best = i;
      continue;
    }
    const double d = std::abs(static_cast<double>(v) - codes[i]), b = std::abs(static_cast<double>(v) - codes[best]);
    if (d < b || (d == b && codes[i] < codes[best])) best = i;
  }
  return best;
}

std::vector<float> values(const at::Tensor& t) {
  const at::Tensor c = t.contiguous().to(at::kFloat);
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

// A vector with every regime: large and small magnitudes, exact zeros, a block's absmax negative,
// a last block shorter than 64, an odd length (the last byte's low nibble is padding).
at::Tensor reference_vector(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(std::sin(0.37 * i) * (1 + i % 7) * 0.01);
  v[5] = 0;
  v[70] = -0.2f;  // block 1's absmax, negative
  return at::tensor(v);
}

}  // namespace

TEST(FourBit, TablesAreBitsandbytesPublishedOnes) {
  for (const auto& [type, published] : {std::pair{FourBitType::kNf4, kNf4}, std::pair{FourBitType::kFp4, kFp4}}) {
    const std::vector<float>& got = zero::llama::four_bit_codes(type);
    ASSERT_EQ(got.size(), 16u);
    const double largest = type == FourBitType::kNf4 ? 1.0 : 12.0;
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ(got[i], static_cast<float>(published[i] / largest)) << i;
  }
  // create_dynamic_map(signed=True): for i = 0..6 the 2^i midpoints of linspace(0.1, 1, 2^i + 1)
  // times 10^(i-6), and their negatives; 0 and 1; sorted.
  std::vector<double> want = {0.0, 1.0};
  for (int i = 0; i < 7; ++i) {
    const int k = 1 << i;
    for (int j = 0; j < k; ++j) {
      const double lo = 0.1 + 0.9 * j / k, hi = 0.1 + 0.9 * (j + 1) / k;
      want.push_back((lo + hi) / 2 * std::pow(10.0, i - 6));
      want.push_back(-(lo + hi) / 2 * std::pow(10.0, i - 6));
    }
  }
  std::sort(want.begin(), want.end());
  const std::vector<float>& map = zero::llama::dynamic_map();
  ASSERT_EQ(map.size(), 256u);
  for (size_t i = 0; i < 256; ++i) EXPECT_NEAR(map[i], want[i], 2e-7 * std::abs(want[i]) + 1e-12) << i;
}

TEST(FourBit, QuantizesAsTheFormatSaysInNf4AndFp4) {
  const int64_t n = 64 * 2 + 23;  // two whole blocks and a short one; odd
  const at::Tensor x = reference_vector(n);
  const std::vector<float> xs = values(x);
  for (const FourBitType type : {FourBitType::kNf4, FourBitType::kFp4}) {
    const std::vector<float>& codes = zero::llama::four_bit_codes(type);
    const zero::llama::FourBitWeight q = zero::llama::quantize_4bit(x, type, /*double_quant=*/false);
    ASSERT_EQ(q.codes.numel(), (n + 1) / 2);
    ASSERT_EQ(q.absmax.numel(), 3);
    const std::vector<float> absmax = values(q.absmax);
    const at::Tensor deq = zero::llama::dequantize_4bit(q, at::kFloat);
    const std::vector<float> ds = values(deq);
    for (int64_t b = 0; b < 3; ++b) {
      float largest = 0;
      for (int64_t i = b * 64; i < std::min(n, (b + 1) * 64); ++i) largest = std::max(largest, std::abs(xs[static_cast<size_t>(i)]));
      EXPECT_EQ(absmax[static_cast<size_t>(b)], largest) << "block " << b;
    }
    EXPECT_EQ(absmax[1], 0.2f) << "a negative value is its block's absmax by magnitude";
    const uint8_t* bytes = q.codes.data_ptr<uint8_t>();
    for (int64_t i = 0; i < n; ++i) {
      const float a = absmax[static_cast<size_t>(i / 64)];
      // Whole blocks scale by the reciprocal (bitsandbytes multiplies by 1 / absmax); the short
      // last block divides.
      const float scaled = i < 128 ? xs[static_cast<size_t>(i)] * (1.0f / a) : xs[static_cast<size_t>(i)] / a;
      const int want = nearest(std::clamp(scaled, -1.0f, 1.0f), codes);
      const int got = i % 2 == 0 ? bytes[i / 2] >> 4 : bytes[i / 2] & 0xF;
      // FP4 has +0 and -0: either is the nearest to a zero.
      if (codes[static_cast<size_t>(want)] == 0.0f) {
        EXPECT_EQ(codes[static_cast<size_t>(got)], 0.0f) << "element " << i;
      } else {
        EXPECT_EQ(got, want) << "element " << i << " (" << scaled << ")";
      }
      EXPECT_EQ(ds[static_cast<size_t>(i)], codes[static_cast<size_t>(got)] * a) << "element " << i;
    }
    EXPECT_EQ(codes[bytes[n / 2] & 0xF], 0.0f) << "the padding nibble is a zero's code";
  }
}

TEST(FourBit, DoubleQuantizationKeepsTheScalesInEightBits) {
  // 600 blocks: scales in second-level blocks of 256, 256 and 88.
  const int64_t n = 64 * 600;
  at::Tensor x = reference_vector(n);
  x.mul_(at::linspace(0.5, 3.0, n));  // absmaxes that differ block to block
  const zero::llama::FourBitWeight plain = zero::llama::quantize_4bit(x, FourBitType::kNf4, false);
  const zero::llama::FourBitWeight dq = zero::llama::quantize_4bit(x, FourBitType::kNf4, true);
  EXPECT_TRUE(at::equal(plain.codes, dq.codes)) << "the 4-bit codes do not depend on how the scales are kept";
  ASSERT_EQ(dq.absmax.scalar_type(), at::kByte);
  ASSERT_EQ(dq.absmax.numel(), 600);
  ASSERT_EQ(dq.absmax2.numel(), 3);
  const std::vector<float> a = values(plain.absmax), a2 = values(dq.absmax2);
  double mean = 0;
  for (float v : a) mean += v;
  mean /= static_cast<double>(a.size());
  EXPECT_NEAR(dq.offset, mean, 1e-6 * mean) << "the offset is the absmaxes' mean";
  const std::vector<float>& map = zero::llama::dynamic_map();
  const uint8_t* c = dq.absmax.data_ptr<uint8_t>();
  const std::vector<float> back = values(zero::llama::block_absmax(dq));
  for (int64_t s = 0; s < 3; ++s) {
    float largest = 0;
    for (int64_t i = s * 256; i < std::min<int64_t>(600, (s + 1) * 256); ++i)
      largest = std::max(largest, std::abs(a[static_cast<size_t>(i)] - dq.offset));
    EXPECT_EQ(a2[static_cast<size_t>(s)], largest) << "second-level block " << s;
  }
  for (int64_t i = 0; i < 600; ++i) {
    const float centred = a[static_cast<size_t>(i)] - dq.offset, scale = a2[static_cast<size_t>(i / 256)];
    const float scaled = i < 512 ? centred * (1.0f / scale) : centred / scale;
    EXPECT_EQ(c[i], nearest(std::clamp(scaled, -1.0f, 1.0f), map)) << "scale " << i;
    EXPECT_EQ(back[static_cast<size_t>(i)], map[c[i]] * scale + dq.offset) << "scale " << i;
  }
  // The weights come back from the 8-bit scales: within the scales' rounding of the plain ones.
  const at::Tensor w_plain = zero::llama::dequantize_4bit(plain, at::kFloat), w_dq = zero::llama::dequantize_4bit(dq, at::kFloat);
  EXPECT_LT(((w_dq - w_plain).abs().max()).item<double>(), 0.02 * x.abs().max().item<double>());
}

// Linear4bit: x · dequantize(W)ᵀ forward, and x's gradient through the dequantized weight again;
// the codes get none.
TEST(FourBit, LinearDequantizesForwardAndBackward) {
  torch::manual_seed(3);
  const at::Tensor w = torch::randn({48, 70}) * 0.1, x = torch::randn({2, 5, 70}).requires_grad_(true);
  const zero::llama::FourBitWeight q = zero::llama::quantize_4bit(w, FourBitType::kNf4, true);
  const at::Tensor deq = zero::llama::dequantize_4bit(q, at::kFloat);
  const at::Tensor bias = torch::randn({48});
  const at::Tensor y = zero::llama::linear_4bit(x, q.type, q.shape, q.codes, q.absmax, q.absmax2, q.offset, bias);
  EXPECT_TRUE(at::allclose(y, at::linear(x.detach(), deq, bias), 1e-6, 1e-6));
  const at::Tensor dy = torch::randn({2, 5, 48});
  y.backward(dy);
  EXPECT_TRUE(at::allclose(x.grad(), at::matmul(dy, deq), 1e-6, 1e-6));
}

// The one-pass dequantization (fp32 and bf16) gives LibTorch's unpack-index-scale-cast bit for bit.
TEST(FourBit, OnePassDequantizationIsLibTorchsOps) {
  const at::Tensor x = reference_vector(64 * 40 + 37);
  for (const FourBitType type : {FourBitType::kNf4, FourBitType::kFp4}) {
    const zero::llama::FourBitWeight q = zero::llama::quantize_4bit(x, type, true);
    const at::Tensor table = at::tensor(zero::llama::four_bit_codes(type), at::kFloat);
    const int64_t n = x.numel();
    const at::Tensor codes = at::stack({q.codes.bitwise_right_shift(4), q.codes.bitwise_and(0xF)}, 1).reshape(-1).narrow(0, 0, n);
    const at::Tensor want = table.index({codes.to(at::kLong)}) *
                            zero::llama::block_absmax(q).repeat_interleave(zero::llama::kFourBitBlock).narrow(0, 0, n);
    for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      const at::Tensor got = zero::llama::dequantize_4bit(q, dtype);
      EXPECT_TRUE(at::equal(got, want.to(dtype))) << c10::toString(dtype);
    }
  }
}
