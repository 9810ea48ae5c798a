// SwiGLU's fused kernels (swiglu_kernels.h). Compiled once per SIMD target by Highway.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/swiglu_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>

#include "kernels/swiglu_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace zero::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// fp32 lanes from bf16 bit patterns, and back rounded to nearest even (NaN as 0x7FC0), as
// c10::BFloat16 converts.
template <class DF>
HWY_INLINE hn::Vec<DF> LoadBf16(DF df, const uint16_t* HWY_RESTRICT p) {
  const hn::RebindToUnsigned<DF> du32;
  const hn::Rebind<uint16_t, DF> du16;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, p))));
}
template <class DF>
HWY_INLINE hn::Vec<DF> RoundToBf16(DF df, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du32;
  const auto bits = hn::BitCast(du32, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du32, 1u));
  auto rounded = hn::And(hn::Add(bits, hn::Add(lsb, hn::Set(du32, 0x7FFFu))), hn::Set(du32, 0xFFFF0000u));
  rounded = hn::IfThenElse(hn::RebindMask(du32, hn::IsNaN(v)), hn::Set(du32, 0x7FC00000u), rounded);
  return hn::BitCast(df, rounded);
}
template <class DF>
HWY_INLINE void StoreBf16(DF df, hn::Vec<DF> rounded, uint16_t* HWY_RESTRICT p) {
  const hn::RebindToUnsigned<DF> du32;
  const hn::RebindToSigned<DF> di32;
  const hn::Rebind<uint16_t, DF> du16;
  // (Shifted as unsigned: the sign stays in bit 15; then a saturating i32 → u16 demotion, exact
  // for values below 2^16.)
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, hn::ShiftRight<16>(hn::BitCast(du32, rounded)))), du16, p);
}

// e^−g for silu and σ: past −g = 100 (beyond float's range), +inf, as std::exp gives, so that
// silu(g) = g / (1 + e^−g) is −0 there as LibTorch's is (Highway's Exp is valid up to 104).
template <class DF>
HWY_INLINE hn::Vec<DF> ExpOfMinus(DF df, hn::Vec<DF> g) {
  const auto minus = hn::Neg(g);
  const auto big = hn::Gt(minus, hn::Set(df, 100.0f));
  return hn::IfThenElse(big, hn::Set(df, HUGE_VALF), hn::Exp(df, hn::Min(minus, hn::Set(df, 100.0f))));
}

// Every element goes through a full vector: the tail is copied into one and back.
template <class T, size_t In, size_t Out, class DF, class Lanes>
HWY_INLINE void ForEachVector(DF df, int64_t n, const T* const (&in)[In], T* const (&out)[Out], Lanes lanes_fn) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const T* from[In];
    T* to[Out];
    for (size_t k = 0; k < In; ++k) from[k] = in[k] + i;
    for (size_t k = 0; k < Out; ++k) to[k] = out[k] + i;
    lanes_fn(from, to);
  }
  if (i == n) return;
  HWY_ALIGN T tail_in[In][hn::MaxLanes(df)] = {};
  HWY_ALIGN T tail_out[Out][hn::MaxLanes(df)] = {};
  const T* from[In];
  T* to[Out];
  for (size_t k = 0; k < In; ++k) {
    for (int64_t j = i; j < n; ++j) tail_in[k][j - i] = in[k][j];
    from[k] = tail_in[k];
  }
  for (size_t k = 0; k < Out; ++k) to[k] = tail_out[k];
  lanes_fn(from, to);
  for (size_t k = 0; k < Out; ++k)
    for (int64_t j = i; j < n; ++j) out[k][j] = tail_out[k][j - i];
}

// LibTorch 1.13's expressions, in its order. In bf16 its kernels round every intermediate to
// bf16 (silu: g / (1 + e^−g) with e^−g and the sum rounded; silu_backward: σ = 1 / (1 + e^−g)
// likewise, then dy·σ, 1 − σ, g·(1 − σ) and 1 + g·(1 − σ) each rounded), and the product and its
// gradients once: `Round` does the same where kBf16, nothing in fp32.
template <bool kBf16, class DF>
HWY_INLINE hn::Vec<DF> Round(DF df, hn::Vec<DF> v) {
  if constexpr (kBf16) return RoundToBf16(df, v);
  return v;
}

template <bool kBf16, class DF, class V>
HWY_INLINE V ForwardLanes(DF df, V g, V u) {
  const auto one = hn::Set(df, 1.0f);
  const auto silu = Round<kBf16>(df, hn::Div(g, Round<kBf16>(df, hn::Add(one, Round<kBf16>(df, ExpOfMinus(df, g))))));
  return Round<kBf16>(df, hn::Mul(silu, u));
}

template <bool kBf16, class DF, class V>
HWY_INLINE void BackwardLanes(DF df, V dout, V g, V u, V& dgate, V& dup) {
  const auto one = hn::Set(df, 1.0f);
  const auto denominator = Round<kBf16>(df, hn::Add(one, Round<kBf16>(df, ExpOfMinus(df, g))));
  const auto silu = Round<kBf16>(df, hn::Div(g, denominator));
  const auto sigma = Round<kBf16>(df, hn::Div(one, denominator));
  const auto dsilu = Round<kBf16>(df, hn::Mul(dout, u));  // the product's backward
  const auto slope = Round<kBf16>(df, hn::Add(one, Round<kBf16>(df, hn::Mul(g, Round<kBf16>(df, hn::Sub(one, sigma))))));
  dgate = Round<kBf16>(df, hn::Mul(Round<kBf16>(df, hn::Mul(dsilu, sigma)), slope));
  dup = Round<kBf16>(df, hn::Mul(dout, silu));
}

void SwigluForward(const float* HWY_RESTRICT gate, const float* HWY_RESTRICT up, float* HWY_RESTRICT out, int64_t n) {
  const hn::ScalableTag<float> df;
  ForEachVector<float>(df, n, {gate, up}, {out}, [&](const float* const* in, float* const* o) {
    hn::StoreU(ForwardLanes<false>(df, hn::LoadU(df, in[0]), hn::LoadU(df, in[1])), df, o[0]);
  });
}

void SwigluForwardBf16(const uint16_t* HWY_RESTRICT gate, const uint16_t* HWY_RESTRICT up, uint16_t* HWY_RESTRICT out,
                       int64_t n) {
  const hn::ScalableTag<float> df;
  ForEachVector<uint16_t>(df, n, {gate, up}, {out}, [&](const uint16_t* const* in, uint16_t* const* o) {
    StoreBf16(df, ForwardLanes<true>(df, LoadBf16(df, in[0]), LoadBf16(df, in[1])), o[0]);
  });
}

void SwigluBackward(const float* HWY_RESTRICT dout, const float* HWY_RESTRICT gate, const float* HWY_RESTRICT up,
                    float* HWY_RESTRICT dgate, float* HWY_RESTRICT dup, int64_t n) {
  const hn::ScalableTag<float> df;
  ForEachVector<float>(df, n, {dout, gate, up}, {dgate, dup}, [&](const float* const* in, float* const* o) {
    hn::Vec<decltype(df)> dg, du;
    BackwardLanes<false>(df, hn::LoadU(df, in[0]), hn::LoadU(df, in[1]), hn::LoadU(df, in[2]), dg, du);
    hn::StoreU(dg, df, o[0]);
    hn::StoreU(du, df, o[1]);
  });
}

void SwigluBackwardBf16(const uint16_t* HWY_RESTRICT dout, const uint16_t* HWY_RESTRICT gate,
                        const uint16_t* HWY_RESTRICT up, uint16_t* HWY_RESTRICT dgate, uint16_t* HWY_RESTRICT dup,
                        int64_t n) {
  const hn::ScalableTag<float> df;
  ForEachVector<uint16_t>(df, n, {dout, gate, up}, {dgate, dup}, [&](const uint16_t* const* in, uint16_t* const* o) {
    hn::Vec<decltype(df)> dg, du;
    BackwardLanes<true>(df, LoadBf16(df, in[0]), LoadBf16(df, in[1]), LoadBf16(df, in[2]), dg, du);
    StoreBf16(df, dg, o[0]);
    StoreBf16(df, du, o[1]);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace zero::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zero::kernels {

HWY_EXPORT(SwigluForward);
HWY_EXPORT(SwigluForwardBf16);
HWY_EXPORT(SwigluBackward);
HWY_EXPORT(SwigluBackwardBf16);

void swiglu_forward(const float* gate, const float* up, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SwigluForward)(gate, up, out, n);
}
void swiglu_forward_bf16(const uint16_t* gate, const uint16_t* up, uint16_t* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SwigluForwardBf16)(gate, up, out, n);
}
void swiglu_backward(const float* dout, const float* gate, const float* up, float* dgate, float* dup, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SwigluBackward)(dout, gate, up, dgate, dup, n);
}
void swiglu_backward_bf16(const uint16_t* dout, const uint16_t* gate, const uint16_t* up, uint16_t* dgate,
                          uint16_t* dup, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SwigluBackwardBf16)(dout, gate, up, dgate, dup, n);
}

}  // namespace zero::kernels
#endif  // HWY_ONCE
