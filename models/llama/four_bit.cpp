#include "models/llama/four_bit.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "zero/error.h"

namespace zero::llama {
namespace {

// bitsandbytes' get_4bit_type tables before normalisation (NF4: create_normal_map's quantiles;
// FP4: its bit patterns' values, sign bit 8), each divided by its largest magnitude.
std::vector<float> normalised(std::vector<float> values) {
  float largest = 0;
  for (float v : values) largest = std::max(largest, std::abs(v));
  for (float& v : values) v /= largest;
  return values;
}

// Midpoints between consecutive values of the sorted codes, and the code index of each sorted slot.
struct Bounds {
  at::Tensor midpoints;  // fp32 [n - 1]
  at::Tensor index_of;   // int64 [n]: sorted slot → code index
};

Bounds bounds_of(const std::vector<float>& codes) {
  const at::Tensor code = at::tensor(codes, at::kFloat);
  const auto [sorted, order] = at::sort(code, /*stable=*/true, 0, false);  // FP4's +0 before its -0
  return {(sorted.narrow(0, 0, sorted.numel() - 1) + sorted.narrow(0, 1, sorted.numel() - 1)) / 2, order};
}

// x / absmax per block of `block` (the last block may be short): absmax [blocks] and the scaled
// values clamped to [-1, 1], as bitsandbytes computes them (x times the reciprocal of the absmax).
std::pair<at::Tensor, at::Tensor> scale_blocks(const at::Tensor& flat, int64_t block) {
  const int64_t n = flat.numel(), full = n / block * block;
  std::vector<at::Tensor> absmaxes, scaled;
  if (full > 0) {
    const at::Tensor blocks = flat.narrow(0, 0, full).view({-1, block});
    const at::Tensor a = blocks.abs().amax(1);
    absmaxes.push_back(a);
    scaled.push_back((blocks * a.clamp_min(1e-38).reciprocal().view({-1, 1})).clamp(-1, 1).reshape(-1));
  }
  if (full < n) {
    const at::Tensor tail = flat.narrow(0, full, n - full);
    const at::Tensor a = tail.abs().amax().clamp_min(1e-38);
    absmaxes.push_back(a.view({1}));
    scaled.push_back((tail / a).clamp(-1, 1));
  }
  return {at::cat(absmaxes), at::cat(scaled)};
}

// Each scaled value's code: the sorted slot bucketize finds (a tie goes to the lower), mapped back.
at::Tensor nearest_codes(const at::Tensor& scaled, const std::vector<float>& codes) {
  const Bounds b = bounds_of(codes);
  return b.index_of.index({at::bucketize(scaled, b.midpoints)});
}

}  // namespace

FourBitType four_bit_type(const std::string& name) {
  if (name == "nf4") return FourBitType::kNf4;
  if (name == "fp4") return FourBitType::kFp4;
  throw Error("--bnb_4bit_quant_type " + name + ": expected nf4 or fp4", "--bnb_4bit_quant_type");
}

const std::vector<float>& four_bit_codes(FourBitType type) {
  static const std::vector<float> nf4 = normalised(
      {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
       -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
       0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f,
       1.0f});
  static const std::vector<float> fp4 = normalised(
      {0.0f, 0.0625f, 8.0f, 12.0f, 4.0f, 6.0f, 2.0f, 3.0f, -0.0f, -0.0625f, -8.0f, -12.0f, -4.0f, -6.0f, -2.0f, -3.0f});
  return type == FourBitType::kNf4 ? nf4 : fp4;
}

const std::vector<float>& dynamic_map() {
  // create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for exponent i = 0..6,
  // the midpoints of linspace(0.1, 1, 2^i + 1) (fp32) times 10^(i - 6), each with its negative;
  // then 0 and 1, sorted. The products are LibTorch's fp32 ones, as bitsandbytes' torch makes them.
  static const std::vector<float> map = [] {
    std::vector<float> data;
    for (int i = 0; i < 7; ++i) {
      const at::Tensor edges = at::linspace(0.1, 1, (1 << i) + 1, at::kFloat);
      const at::Tensor means = (edges.narrow(0, 0, edges.numel() - 1) + edges.narrow(0, 1, edges.numel() - 1)) / 2.0;
      const at::Tensor values = means * std::pow(10.0, i - 6);
      for (int64_t k = 0; k < values.numel(); ++k) data.push_back(values[k].item<float>());
      for (int64_t k = 0; k < values.numel(); ++k) data.push_back(-values[k].item<float>());
    }
    data.push_back(0.0f);
    data.push_back(1.0f);
    std::sort(data.begin(), data.end());
    return data;
  }();
  return map;
}

FourBitWeight quantize_4bit(const at::Tensor& weight, FourBitType type, bool double_quant) {
  at::NoGradGuard no_grad;
  FourBitWeight w;
  w.type = type;
  w.shape = weight.sizes().vec();
  const at::Tensor flat = weight.detach().reshape(-1).to(at::kFloat);
  auto [absmax, scaled] = scale_blocks(flat, kFourBitBlock);
  // An odd count: the last byte's low nibble is the code of a zero (bitsandbytes pads the values).
  if (scaled.numel() % 2) scaled = at::cat({scaled, at::zeros({1}, scaled.options())});
  const at::Tensor q = nearest_codes(scaled, four_bit_codes(type)).to(at::kByte);
  w.codes = at::bitwise_or(q.slice(0, 0, q.numel(), 2).bitwise_left_shift(4), q.slice(0, 1, q.numel(), 2));
  if (!double_quant) {
    w.absmax = absmax;
    return w;
  }
  // bitsandbytes' compress_statistics: the absmaxes less their mean, blockwise in 8 bits.
  w.offset = absmax.mean().item<float>();
  auto [absmax2, scaled2] = scale_blocks(absmax - w.offset, kDoubleQuantBlock);
  w.absmax = nearest_codes(scaled2, dynamic_map()).to(at::kByte);
  w.absmax2 = absmax2;
  return w;
}

at::Tensor block_absmax(const FourBitWeight& w) {
  if (!w.double_quant()) return w.absmax;
  const at::Tensor map = at::tensor(dynamic_map(), at::kFloat);
  const at::Tensor values = map.index({w.absmax.to(at::kLong)});
  const int64_t n = values.numel();
  const at::Tensor scale = w.absmax2.repeat_interleave(kDoubleQuantBlock).narrow(0, 0, n);
  return values * scale + w.offset;
}

at::Tensor dequantize_4bit(FourBitType type, const std::vector<int64_t>& shape, const at::Tensor& codes,
                           const at::Tensor& absmax, const at::Tensor& absmax2, float offset, at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  FourBitWeight w{.type = type,
                  .shape = shape,
                  .codes = codes,
                  .absmax = absmax,
                  .absmax2 = absmax2.defined() && absmax2.numel() > 0 ? absmax2 : at::Tensor(),
                  .offset = offset};
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const at::Tensor scales = block_absmax(w).contiguous();
  if ((dtype == at::kFloat || dtype == at::kBFloat16) && codes.is_cpu()) {
    // One pass: each byte's two codes through the table, times their block's absmax (the fp32
    // product bitsandbytes makes), rounded once to the dtype. A layer at a time, forward and
    // backward: LibTorch's unpack, index and broadcast took 3.5 s a step at 360M.
    const at::Tensor out = at::empty(shape, at::TensorOptions(dtype));
    const std::vector<float>& table = four_bit_codes(type);
    const at::Tensor packed = codes.contiguous();  // (kept: a copy's pointer would dangle)
    const uint8_t* c = packed.data_ptr<uint8_t>();
    const float* a = scales.data_ptr<float>();
    auto fill = [&](auto* o) {
      using Out = std::remove_pointer_t<decltype(o)>;
      at::parallel_for(0, (n + kFourBitBlock - 1) / kFourBitBlock, 16, [&](int64_t first, int64_t last) {
        for (int64_t b = first; b < last; ++b) {
          const float scale = a[b];
          const int64_t end = std::min(n, (b + 1) * kFourBitBlock);
          for (int64_t i = b * kFourBitBlock; i < end; ++i) {
            const uint8_t byte = c[i / 2];
            o[i] = Out(table[i % 2 == 0 ? byte >> 4 : byte & 0xF] * scale);
          }
        }
      });
    };
    if (dtype == at::kFloat) {
      fill(out.data_ptr<float>());
    } else {
      fill(out.data_ptr<at::BFloat16>());
    }
    return out;
  }
  const at::Tensor table = at::tensor(four_bit_codes(type), at::kFloat);
  const at::Tensor q = at::stack({codes.bitwise_right_shift(4), codes.bitwise_and(0xF)}, 1).reshape(-1).narrow(0, 0, n);
  const at::Tensor values = table.index({q.to(at::kLong)});
  const at::Tensor scale = scales.repeat_interleave(kFourBitBlock).narrow(0, 0, n);
  return (values * scale).to(dtype).view(shape);
}

at::Tensor dequantize_4bit(const FourBitWeight& w, at::ScalarType dtype) {
  return dequantize_4bit(w.type, w.shape, w.codes, w.absmax, w.absmax2, w.offset, dtype);
}

namespace {

struct Linear4bit : public torch::autograd::Function<Linear4bit> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& codes,
                            const at::Tensor& absmax, const at::Tensor& absmax2, int64_t type,
                            std::vector<int64_t> shape, double offset) {
    ctx->save_for_backward({codes, absmax, absmax2});
    ctx->saved_data["type"] = type;
    ctx->saved_data["shape"] = shape;
    ctx->saved_data["offset"] = offset;
    const at::Tensor w = dequantize_4bit(static_cast<FourBitType>(type), shape, codes, absmax, absmax2,
                                         static_cast<float>(offset), x.scalar_type());
    return at::matmul(x, w.t());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor w = dequantize_4bit(static_cast<FourBitType>(ctx->saved_data["type"].toInt()),
                                         ctx->saved_data["shape"].toIntVector(), saved[0], saved[1], saved[2],
                                         static_cast<float>(ctx->saved_data["offset"].toDouble()),
                                         grads[0].scalar_type());
    return {at::matmul(grads[0], w), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor linear_4bit(const at::Tensor& x, FourBitType type, const std::vector<int64_t>& shape, const at::Tensor& codes,
                       const at::Tensor& absmax, const at::Tensor& absmax2, float offset, const at::Tensor& bias) {
  // (A custom function takes no undefined tensor: no second-level scales are an empty one.)
  const at::Tensor y = Linear4bit::apply(x, codes, absmax, absmax2.defined() ? absmax2 : at::empty({0}, at::kFloat),
                                         static_cast<int64_t>(type), shape, static_cast<double>(offset));
  return bias.defined() ? y + bias : y;
}

}  // namespace zero::llama
