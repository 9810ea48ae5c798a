// Highway helpers the fused kernels share (swiglu_kernels.cpp, softmax_kernels.cpp): bf16 as
// fp32 lanes and back, and one vector over a range's ragged tail. Included once per SIMD target
// from inside a kernel file's HWY_NAMESPACE, hence the per-target include guard.
#if defined(ZERO_KERNELS_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ZERO_KERNELS_SIMD_INL_H_
#undef ZERO_KERNELS_SIMD_INL_H_
#else
#define ZERO_KERNELS_SIMD_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>

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

// `v` rounded to bf16 where kBf16 (as LibTorch's bf16 kernels round each result), else as it is.
template <bool kBf16, class DF>
HWY_INLINE hn::Vec<DF> Round(DF df, hn::Vec<DF> v) {
  if constexpr (kBf16) return RoundToBf16(df, v);
  return v;
}

// fp32 lanes from fp32 or bf16 (uint16_t bit patterns) memory, and back (bf16 rounded).
template <class DF>
HWY_INLINE hn::Vec<DF> LoadLanes(DF df, const float* HWY_RESTRICT p) {
  return hn::LoadU(df, p);
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadLanes(DF df, const uint16_t* HWY_RESTRICT p) {
  return LoadBf16(df, p);
}
template <class DF>
HWY_INLINE void StoreLanes(DF df, hn::Vec<DF> v, float* HWY_RESTRICT p) {
  hn::StoreU(v, df, p);
}
template <class DF>
HWY_INLINE void StoreLanes(DF df, hn::Vec<DF> v, uint16_t* HWY_RESTRICT p) {
  StoreBf16(df, RoundToBf16(df, v), p);
}

// The first `count` (≤ lanes) elements at p as lanes, the others 0, never reading past p + count.
template <class DF, class T>
HWY_INLINE hn::Vec<DF> LoadFirst(DF df, const T* HWY_RESTRICT p, int64_t count) {
  if (count == static_cast<int64_t>(hn::Lanes(df))) return LoadLanes(df, p);
  HWY_ALIGN T part[hn::MaxLanes(df)] = {};
  for (int64_t j = 0; j < count; ++j) part[j] = p[j];
  return LoadLanes(df, part);
}
// Stores the first `count` (≤ lanes) lanes of v at p, writing nothing past p + count.
template <class DF, class T>
HWY_INLINE void StoreFirst(DF df, hn::Vec<DF> v, T* HWY_RESTRICT p, int64_t count) {
  if (count == static_cast<int64_t>(hn::Lanes(df))) return StoreLanes(df, v, p);
  HWY_ALIGN T part[hn::MaxLanes(df)];
  StoreLanes(df, v, part);
  for (int64_t j = 0; j < count; ++j) p[j] = part[j];
}

// fn(i, count) for each vector's worth of [0, n): count = lanes but for the tail.
template <class DF, class Fn>
HWY_INLINE void ForEachLanes(DF df, int64_t n, Fn fn) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t i = 0; i < n; i += lanes) fn(i, n - i < lanes ? n - i : lanes);
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

}  // namespace HWY_NAMESPACE
}  // namespace zero::kernels
HWY_AFTER_NAMESPACE();

#endif  // ZERO_KERNELS_SIMD_INL_H_
