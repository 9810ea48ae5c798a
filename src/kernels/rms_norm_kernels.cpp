// RMSNorm's fused kernels (rms_norm_kernels.h). Compiled once per SIMD target by Highway.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rms_norm_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/rms_norm_kernels.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zero::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class T>
void Forward(const T* HWY_RESTRICT x, const T* HWY_RESTRICT w, int64_t C, float eps, T* HWY_RESTRICT y,
             float* HWY_RESTRICT r_out) {
  constexpr bool kBf16 = std::is_same_v<T, uint16_t>;
  const hn::ScalableTag<float> df;
  auto squares = hn::Zero(df);
  ForEachLanes(df, C, [&](int64_t i, int64_t count) {
    const auto v = LoadFirst(df, x + i, count);  // (zeros past the row)
    squares = hn::MulAdd(v, v, squares);
  });
  const float r = 1.0f / std::sqrt(hn::GetLane(hn::SumOfLanes(df, squares)) / static_cast<float>(C) + eps);
  const auto rv = hn::Set(df, r);
  ForEachLanes(df, C, [&](int64_t i, int64_t count) {
    const auto n = Round<kBf16>(df, hn::Mul(LoadFirst(df, x + i, count), rv));
    StoreFirst(df, hn::Mul(LoadFirst(df, w + i, count), n), y + i, count);
  });
  *r_out = r;
}

template <class T>
void Backward(const T* HWY_RESTRICT dy, const T* HWY_RESTRICT x, const T* HWY_RESTRICT w, int64_t C, float r,
              T* HWY_RESTRICT dx, float* HWY_RESTRICT dw_sum) {
  constexpr bool kBf16 = std::is_same_v<T, uint16_t>;
  const hn::ScalableTag<float> df;
  const auto rv = hn::Set(df, r);
  auto dot = hn::Zero(df);  // Σ dn·x
  ForEachLanes(df, C, [&](int64_t i, int64_t count) {
    const auto g = LoadFirst(df, dy + i, count), xv = LoadFirst(df, x + i, count);
    const auto n = Round<kBf16>(df, hn::Mul(xv, rv));
    // w's gradient: each product rounded as LibTorch's bf16 mul does, then summed in fp32.
    const auto sum = hn::Add(LoadFirst(df, dw_sum + i, count), Round<kBf16>(df, hn::Mul(g, n)));
    StoreFirst(df, sum, dw_sum + i, count);
    dot = hn::MulAdd(Round<kBf16>(df, hn::Mul(g, LoadFirst(df, w + i, count))), xv, dot);
  });
  const float total = hn::GetLane(hn::SumOfLanes(df, dot));
  const auto coefficient = hn::Set(df, -r * r * r * total / static_cast<float>(C));
  ForEachLanes(df, C, [&](int64_t i, int64_t count) {
    const auto dn = Round<kBf16>(df, hn::Mul(LoadFirst(df, dy + i, count), LoadFirst(df, w + i, count)));
    StoreFirst(df, hn::MulAdd(coefficient, LoadFirst(df, x + i, count), hn::Mul(dn, rv)), dx + i, count);
  });
}

void ForwardF32(const float* x, const float* w, int64_t C, float eps, float* y, float* r) { Forward(x, w, C, eps, y, r); }
void ForwardBf16(const uint16_t* x, const uint16_t* w, int64_t C, float eps, uint16_t* y, float* r) {
  Forward(x, w, C, eps, y, r);
}
void BackwardF32(const float* dy, const float* x, const float* w, int64_t C, float r, float* dx, float* dw_sum) {
  Backward(dy, x, w, C, r, dx, dw_sum);
}
void BackwardBf16(const uint16_t* dy, const uint16_t* x, const uint16_t* w, int64_t C, float r, uint16_t* dx,
                  float* dw_sum) {
  Backward(dy, x, w, C, r, dx, dw_sum);
}

}  // namespace HWY_NAMESPACE
}  // namespace zero::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zero::kernels {

HWY_EXPORT(ForwardF32);
HWY_EXPORT(ForwardBf16);
HWY_EXPORT(BackwardF32);
HWY_EXPORT(BackwardBf16);

void rms_norm_forward(const float* x, const float* w, int64_t C, float eps, float* y, float* r) {
  HWY_DYNAMIC_DISPATCH(ForwardF32)(x, w, C, eps, y, r);
}
void rms_norm_forward_bf16(const uint16_t* x, const uint16_t* w, int64_t C, float eps, uint16_t* y, float* r) {
  HWY_DYNAMIC_DISPATCH(ForwardBf16)(x, w, C, eps, y, r);
}
void rms_norm_backward(const float* dy, const float* x, const float* w, int64_t C, float r, float* dx, float* dw_sum) {
  HWY_DYNAMIC_DISPATCH(BackwardF32)(dy, x, w, C, r, dx, dw_sum);
}
void rms_norm_backward_bf16(const uint16_t* dy, const uint16_t* x, const uint16_t* w, int64_t C, float r, uint16_t* dx,
                            float* dw_sum) {
  HWY_DYNAMIC_DISPATCH(BackwardBf16)(dy, x, w, C, r, dx, dw_sum);
}

}  // namespace zero::kernels
#endif  // HWY_ONCE
