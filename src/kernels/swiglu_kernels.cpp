// SwiGLU's fused kernels (swiglu_kernels.h). Compiled once per SIMD target by Highway.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/swiglu_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <cmath>

#include "kernels/simd-inl.h"
#include "kernels/swiglu_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace zero::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// e^−g for silu and σ: past −g = 100 (beyond float's range), +inf, as std::exp gives, so that
// silu(g) = g / (1 + e^−g) is −0 there as LibTorch's is (Highway's Exp is valid up to 104).
template <class DF>
HWY_INLINE hn::Vec<DF> ExpOfMinus(DF df, hn::Vec<DF> g) {
  const auto minus = hn::Neg(g);
  const auto big = hn::Gt(minus, hn::Set(df, 100.0f));
  return hn::IfThenElse(big, hn::Set(df, HUGE_VALF), hn::Exp(df, hn::Min(minus, hn::Set(df, 100.0f))));
}

// LibTorch 1.13's expressions, in its order. In bf16 its kernels round every intermediate to
// bf16 (silu: g / (1 + e^−g) with e^−g and the sum rounded; silu_backward: σ = 1 / (1 + e^−g)
// likewise, then dy·σ, 1 − σ, g·(1 − σ) and 1 + g·(1 − σ) each rounded), and the product and its
// gradients once: `Round` does the same where kBf16, nothing in fp32.
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
