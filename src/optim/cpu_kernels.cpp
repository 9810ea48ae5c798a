#include "optim/cpu_kernels.h"

// Highway's per-target compilation: this file is included once per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "optim/cpu_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstring>

#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zero::optim {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Note: the operations and their rounding follow LibTorch's own Adam (mul_, add_ with alpha as
// one fused multiply-add, addcmul_, sqrt, div, addcdiv_), so a step equals torch::optim's.
template <class D>
HWY_INLINE void AdamLanes(D d, const AdamScalars& s, float* HWY_RESTRICT p, const float* HWY_RESTRICT g,
                          float* HWY_RESTRICT m, float* HWY_RESTRICT v) {
  const auto pv = hn::LoadU(d, p);
  const auto gv = hn::MulAdd(pv, hn::Set(d, s.l2), hn::Mul(hn::LoadU(d, g), hn::Set(d, s.grad_scale)));
  const auto mv = hn::MulAdd(gv, hn::Set(d, s.one_minus_beta1), hn::Mul(hn::LoadU(d, m), hn::Set(d, s.beta1)));
  const auto vv =
      hn::Add(hn::Mul(hn::LoadU(d, v), hn::Set(d, s.beta2)), hn::Mul(hn::Mul(hn::Set(d, s.one_minus_beta2), gv), gv));
  const auto denom = hn::Add(hn::Div(hn::Sqrt(vv), hn::Set(d, s.sqrt_bc2)), hn::Set(d, s.eps));
  const auto updated = hn::Add(hn::Mul(pv, hn::Set(d, s.decay)), hn::Div(hn::Mul(hn::Set(d, -s.step_size), mv), denom));
  hn::StoreU(mv, d, m);
  hn::StoreU(vv, d, v);
  hn::StoreU(updated, d, p);
}

void AdamUpdate(float* HWY_RESTRICT p, const float* HWY_RESTRICT g, float* HWY_RESTRICT m, float* HWY_RESTRICT v,
                int64_t n, const AdamScalars& s) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) AdamLanes(d, s, p + i, g + i, m + i, v + i);
  if (i == n) return;
  // The tail goes through a full vector too (copied out and back), so every element sees the
  // same instructions wherever a tile or partition boundary puts it: tiles give the same bits.
  HWY_ALIGN float tail[4][hn::MaxLanes(d)] = {};
  const size_t rest = static_cast<size_t>(n - i);
  for (size_t k = 0; k < rest; ++k) {
    tail[0][k] = p[i + k];
    tail[1][k] = g[i + k];
    tail[2][k] = m[i + k];
    tail[3][k] = v[i + k];
  }
  AdamLanes(d, s, tail[0], tail[1], tail[2], tail[3]);
  for (size_t k = 0; k < rest; ++k) {
    p[i + k] = tail[0][k];
    m[i + k] = tail[2][k];
    v[i + k] = tail[3][k];
  }
}

// Lanes kernels over arrays of n floats: every element goes through a full vector, the tail too
// (copied out and back), so a tile or partition boundary never changes an element's bits.
// `arrays` are the kernel's arguments in order; `written[k]`: array k is stored back.
template <size_t N, class D, class Lanes>
HWY_INLINE void ForEachVector(D d, int64_t n, float* const (&arrays)[N], const bool (&written)[N], Lanes lanes_fn) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    float* at[N];
    for (size_t k = 0; k < N; ++k) at[k] = arrays[k] + i;
    lanes_fn(at);
  }
  if (i == n) return;
  HWY_ALIGN float tail[N][hn::MaxLanes(d)] = {};
  const size_t rest = static_cast<size_t>(n - i);
  float* at[N];
  for (size_t k = 0; k < N; ++k) {
    for (size_t j = 0; j < rest; ++j) tail[k][j] = arrays[k][i + j];
    at[k] = tail[k];
  }
  lanes_fn(at);
  for (size_t k = 0; k < N; ++k)
    if (written[k])
      for (size_t j = 0; j < rest; ++j) arrays[k][i + j] = tail[k][j];
}

// The operations and roundings of the LibTorch ops they replace (flat_optimizer.cpp's history):
// add_ with alpha is one fused multiply-add; addcmul_/addcdiv_ compute value·t1·t2 (value·t1/t2)
// left to right, then add.
void AdagradUpdate(float* HWY_RESTRICT p, const float* HWY_RESTRICT g, float* HWY_RESTRICT sum, int64_t n,
                   const AdagradScalars& s) {
  const hn::ScalableTag<float> d;
  float* const arrays[3] = {p, const_cast<float*>(g), sum};
  ForEachVector(d, n, arrays, {true, false, true}, [&](float* const (&at)[3]) {
    const auto pv = hn::LoadU(d, at[0]);
    const auto gv = hn::MulAdd(pv, hn::Set(d, s.l2), hn::Mul(hn::LoadU(d, at[1]), hn::Set(d, s.grad_scale)));
    const auto sv = hn::Add(hn::LoadU(d, at[2]), hn::Mul(gv, gv));
    const auto denom = hn::Add(hn::Sqrt(sv), hn::Set(d, s.eps));
    hn::StoreU(sv, d, at[2]);
    hn::StoreU(hn::Add(pv, hn::Div(hn::Mul(hn::Set(d, -s.lr), gv), denom)), d, at[0]);
  });
}

void LionUpdate(float* HWY_RESTRICT p, const float* HWY_RESTRICT g, float* HWY_RESTRICT m, int64_t n,
                const LionScalars& s) {
  const hn::ScalableTag<float> d;
  float* const arrays[3] = {p, const_cast<float*>(g), m};
  ForEachVector(d, n, arrays, {true, false, true}, [&](float* const (&at)[3]) {
    const auto zero = hn::Zero(d);
    const auto gv = hn::Mul(hn::LoadU(d, at[1]), hn::Set(d, s.grad_scale));
    const auto mv = hn::LoadU(d, at[2]);
    const auto mix = hn::MulAdd(gv, hn::Set(d, s.one_minus_beta1), hn::Mul(mv, hn::Set(d, s.beta1)));
    const auto sign = hn::IfThenElse(hn::Gt(mix, zero), hn::Set(d, 1.0f),
                                     hn::IfThenElse(hn::Lt(mix, zero), hn::Set(d, -1.0f), zero));
    const auto pv = hn::Mul(hn::LoadU(d, at[0]), hn::Set(d, s.decay));
    hn::StoreU(hn::MulAdd(sign, hn::Set(d, -s.lr), pv), d, at[0]);
    hn::StoreU(hn::MulAdd(gv, hn::Set(d, s.one_minus_beta2), hn::Mul(mv, hn::Set(d, s.beta2))), d, at[2]);
  });
}

HWY_INLINE double Widen(float x) { return static_cast<double>(x); }
HWY_INLINE double Widen(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &word, sizeof x);
  return static_cast<double>(x);
}

template <class T>
double SumOfSquaresOf(const T* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // as many floats as doubles in a vector
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(dd));
  auto sum0 = hn::Zero(dd), sum1 = hn::Zero(dd);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {  // two accumulators: the adds do not wait on each other
    // (bf16 widens to fp32 exactly: both sums see the same values in the same order.)
    const auto a = hn::PromoteTo(dd, kernels::HWY_NAMESPACE::LoadLanes(df, x + i));
    const auto b = hn::PromoteTo(dd, kernels::HWY_NAMESPACE::LoadLanes(df, x + i + lanes));
    sum0 = hn::MulAdd(a, a, sum0);
    sum1 = hn::MulAdd(b, b, sum1);
  }
  double total = hn::GetLane(hn::SumOfLanes(dd, hn::Add(sum0, sum1)));
  for (; i < n; ++i) total += Widen(x[i]) * Widen(x[i]);
  return total;
}
double SumOfSquares(const float* HWY_RESTRICT x, int64_t n) { return SumOfSquaresOf(x, n); }
double SumOfSquaresBf16(const uint16_t* HWY_RESTRICT x, int64_t n) { return SumOfSquaresOf(x, n); }

}  // namespace HWY_NAMESPACE
}  // namespace zero::optim
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/in_chunks.h"
#include "zero/error.h"

namespace zero::optim {

HWY_EXPORT(AdamUpdate);
HWY_EXPORT(AdagradUpdate);
HWY_EXPORT(LionUpdate);
HWY_EXPORT(SumOfSquares);
HWY_EXPORT(SumOfSquaresBf16);

namespace {

// Elements per task when several threads share a tile (kernels::in_chunks).
constexpr int64_t kChunk = 1 << 16;

}  // namespace

void adam_update(float* params, const float* grads, float* m, float* v, int64_t n, const AdamScalars& s) {
  // Chunks over LibTorch's intra-op threads (1 in the engine's one-thread-per-rank setting).
  // Every element goes through the same vector code whichever chunk holds it (the tail too), so
  // the bits do not depend on the number of threads.
  kernels::in_chunks(n, kChunk, [&](int64_t at, int64_t length) {
    HWY_DYNAMIC_DISPATCH(AdamUpdate)(params + at, grads + at, m + at, v + at, length, s);
  });
}

void adagrad_update(float* params, const float* grads, float* sum, int64_t n, const AdagradScalars& s) {
  kernels::in_chunks(n, kChunk, [&](int64_t at, int64_t length) {
    HWY_DYNAMIC_DISPATCH(AdagradUpdate)(params + at, grads + at, sum + at, length, s);
  });
}

void lion_update(float* params, const float* grads, float* m, int64_t n, const LionScalars& s) {
  kernels::in_chunks(n, kChunk, [&](int64_t at, int64_t length) {
    HWY_DYNAMIC_DISPATCH(LionUpdate)(params + at, grads + at, m + at, length, s);
  });
}

double sum_of_squares(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(SumOfSquares)(x, n); }
double sum_of_squares_bf16(const uint16_t* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(SumOfSquaresBf16)(x, n); }

void limit_simd(const char* target) {
  if (target == nullptr || *target == '\0' || std::strcmp(target, "auto") == 0) return;
  if (std::strcmp(target, "avx2") != 0)
    throw Error(std::string("ZERO_SIMD=") + target + ": expected auto or avx2", "ZERO_SIMD");
  // Highway's targets are bits, better ones lower: every target above AVX2 goes.
  hwy::DisableTargets(HWY_AVX2 - 1);
}

}  // namespace zero::optim
#endif
