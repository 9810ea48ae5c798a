// Rotary position embedding's fused kernels (rope_kernels.h). Compiled once per SIMD target by
// Highway.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rope_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <type_traits>

#include "kernels/rope_kernels.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zero::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class T>
void Forward(const T* HWY_RESTRICT x, const T* HWY_RESTRICT cos, const T* HWY_RESTRICT sin, int64_t D,
             T* HWY_RESTRICT out) {
  constexpr bool kBf16 = std::is_same_v<T, uint16_t>;
  const hn::ScalableTag<float> df;
  const int64_t half = D / 2;
  ForEachLanes(df, half, [&](int64_t i, int64_t count) {
    const auto x1 = LoadFirst(df, x + i, count), x2 = LoadFirst(df, x + half + i, count);
    const auto first = hn::Add(Round<kBf16>(df, hn::Mul(x1, LoadFirst(df, cos + i, count))),
                               Round<kBf16>(df, hn::Mul(hn::Neg(x2), LoadFirst(df, sin + i, count))));
    const auto second = hn::Add(Round<kBf16>(df, hn::Mul(x2, LoadFirst(df, cos + half + i, count))),
                                Round<kBf16>(df, hn::Mul(x1, LoadFirst(df, sin + half + i, count))));
    StoreFirst(df, first, out + i, count);
    StoreFirst(df, second, out + half + i, count);
  });
}

template <class T>
void Backward(const T* HWY_RESTRICT dout, const T* HWY_RESTRICT cos, const T* HWY_RESTRICT sin, int64_t D,
              T* HWY_RESTRICT dx) {
  constexpr bool kBf16 = std::is_same_v<T, uint16_t>;
  const hn::ScalableTag<float> df;
  const int64_t half = D / 2;
  ForEachLanes(df, half, [&](int64_t i, int64_t count) {
    const auto g1 = LoadFirst(df, dout + i, count), g2 = LoadFirst(df, dout + half + i, count);
    const auto through_sin1 = Round<kBf16>(df, hn::Mul(g1, LoadFirst(df, sin + i, count)));
    const auto through_sin2 = Round<kBf16>(df, hn::Mul(g2, LoadFirst(df, sin + half + i, count)));
    const auto first = hn::Add(Round<kBf16>(df, hn::Mul(g1, LoadFirst(df, cos + i, count))), through_sin2);
    const auto second = hn::Sub(Round<kBf16>(df, hn::Mul(g2, LoadFirst(df, cos + half + i, count))), through_sin1);
    StoreFirst(df, first, dx + i, count);
    StoreFirst(df, second, dx + half + i, count);
  });
}

void ForwardF32(const float* x, const float* cos, const float* sin, int64_t D, float* out) {
  Forward(x, cos, sin, D, out);
}
void ForwardBf16(const uint16_t* x, const uint16_t* cos, const uint16_t* sin, int64_t D, uint16_t* out) {
  Forward(x, cos, sin, D, out);
}
void BackwardF32(const float* dout, const float* cos, const float* sin, int64_t D, float* dx) {
  Backward(dout, cos, sin, D, dx);
}
void BackwardBf16(const uint16_t* dout, const uint16_t* cos, const uint16_t* sin, int64_t D, uint16_t* dx) {
  Backward(dout, cos, sin, D, dx);
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

void rope_forward(const float* x, const float* cos, const float* sin, int64_t D, float* out) {
  HWY_DYNAMIC_DISPATCH(ForwardF32)(x, cos, sin, D, out);
}
void rope_forward_bf16(const uint16_t* x, const uint16_t* cos, const uint16_t* sin, int64_t D, uint16_t* out) {
  HWY_DYNAMIC_DISPATCH(ForwardBf16)(x, cos, sin, D, out);
}
void rope_backward(const float* dout, const float* cos, const float* sin, int64_t D, float* dx) {
  HWY_DYNAMIC_DISPATCH(BackwardF32)(dout, cos, sin, D, dx);
}
void rope_backward_bf16(const uint16_t* dout, const uint16_t* cos, const uint16_t* sin, int64_t D, uint16_t* dx) {
  HWY_DYNAMIC_DISPATCH(BackwardBf16)(dout, cos, sin, D, dx);
}

}  // namespace zero::kernels
#endif  // HWY_ONCE
