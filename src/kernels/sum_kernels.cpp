// The collectives' summation (sum_kernels.h). Compiled once per SIMD target by Highway.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/sum_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/simd-inl.h"
#include "kernels/sum_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace zero::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class T>
void SumRows(const T* const* rows, int count, int64_t n, float divisor, T* out) {
  const hn::ScalableTag<float> df;
  const auto by = hn::Set(df, divisor);
  ForEachLanes(df, n, [&](int64_t i, int64_t lanes) {
    auto sum = LoadFirst(df, rows[0] + i, lanes);
    for (int r = 1; r < count; ++r) sum = hn::Add(sum, LoadFirst(df, rows[r] + i, lanes));
    if (divisor != 1.0f) sum = hn::Div(sum, by);
    StoreFirst(df, sum, out + i, lanes);
  });
}

void SumRowsF32(const float* const* rows, int count, int64_t n, float divisor, float* out) {
  SumRows(rows, count, n, divisor, out);
}
void SumRowsBf16(const uint16_t* const* rows, int count, int64_t n, float divisor, uint16_t* out) {
  SumRows(rows, count, n, divisor, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace zero::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zero::kernels {

HWY_EXPORT(SumRowsF32);
HWY_EXPORT(SumRowsBf16);

void sum_rows(const float* const* rows, int count, int64_t n, float divisor, float* out) {
  HWY_DYNAMIC_DISPATCH(SumRowsF32)(rows, count, n, divisor, out);
}
void sum_rows_bf16(const uint16_t* const* rows, int count, int64_t n, float divisor, uint16_t* out) {
  HWY_DYNAMIC_DISPATCH(SumRowsBf16)(rows, count, n, divisor, out);
}

}  // namespace zero::kernels
#endif  // HWY_ONCE
