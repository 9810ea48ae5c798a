// Softmax rows for attention and the loss (softmax_kernels.h). Compiled once per SIMD target by Highway.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/softmax_kernels.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zero::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class T>
constexpr bool kIsBf16 = std::is_same_v<T, uint16_t>;

// fn(i, count, first) for each vector's worth of [lo, hi): `first` masks its `count` lanes.
template <class DF, class Fn>
HWY_INLINE void ForEachVisible(DF df, int64_t lo, int64_t hi, Fn fn) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t i = lo; i < hi; i += lanes) {
    const int64_t count = std::min(lanes, hi - i);
    fn(i, count, hn::FirstN(df, static_cast<size_t>(count)));
  }
}

// Zeros the row outside its visible keys.
template <class T>
void ZeroHidden(const ScoreRow& row, T* out) {
  std::fill(out, out + row.lo, T{0});
  std::fill(out + row.hi, out + row.keys, T{0});
}

// x = s · scale as the dtype's multiply gives it.
template <class T, class DF>
HWY_INLINE hn::Vec<DF> Scaled(DF df, const T* s, int64_t count, float scale) {
  return Round<kIsBf16<T>>(df, hn::Mul(LoadFirst(df, s, count), hn::Set(df, scale)));
}

template <class T>
void SoftmaxRow(const T* HWY_RESTRICT s, const ScoreRow& row, T* HWY_RESTRICT p, float* HWY_RESTRICT lse,
                float* HWY_RESTRICT work) {
  const hn::ScalableTag<float> df;
  const auto minus_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  auto max = minus_inf;
  ForEachVisible(df, row.lo, row.hi, [&](int64_t i, int64_t count, auto first) {
    const auto x = Scaled(df, s + i, count, row.scale);
    hn::StoreU(x, df, work + i);
    max = hn::Max(max, hn::IfThenElse(first, x, minus_inf));
  });
  const auto top = hn::MaxOfLanes(df, max);
  auto sum = hn::Zero(df);
  ForEachVisible(df, row.lo, row.hi, [&](int64_t i, int64_t, auto first) {
    const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, work + i), top));
    hn::StoreU(e, df, work + i);
    sum = hn::Add(sum, hn::IfThenElseZero(first, e));
  });
  const float total = hn::GetLane(hn::SumOfLanes(df, sum));
  const auto inverse = hn::Set(df, 1.0f / total);
  ForEachVisible(df, row.lo, row.hi, [&](int64_t i, int64_t count, auto) {
    StoreFirst(df, hn::Mul(hn::LoadU(df, work + i), inverse), p + i, count);
  });
  ZeroHidden(row, p);
  *lse = hn::GetLane(top) + std::log(total);
}

// p = exp(x − lse) in the row's dtype; in bf16 also `p32`, the fp32 values before rounding, which
// the scores' gradient reads instead of computing the exponentials again.
template <class T>
void ProbsRow(const T* HWY_RESTRICT s, const ScoreRow& row, float lse, T* HWY_RESTRICT p, float* HWY_RESTRICT p32) {
  const hn::ScalableTag<float> df;
  const auto shift = hn::Set(df, lse);
  ForEachVisible(df, row.lo, row.hi, [&](int64_t i, int64_t count, auto) {
    const auto prob = hn::Exp(df, hn::Sub(Scaled(df, s + i, count, row.scale), shift));
    if constexpr (kIsBf16<T>) StoreFirst(df, prob, p32 + i, count);
    StoreFirst(df, prob, p + i, count);
  });
  ZeroHidden(row, p);
}

// `prob`: the fp32 probabilities (in fp32 the probabilities themselves, which ds may overwrite:
// each element is read before its own is written, and no other).
template <class T>
void ScoresGradRow(const float* prob, const T* HWY_RESTRICT dp, const ScoreRow& row, T* ds) {
  constexpr bool kBf16 = kIsBf16<T>;
  const hn::ScalableTag<float> df;
  auto dot = hn::Zero(df);
  ForEachVisible(df, row.lo, row.hi, [&](int64_t i, int64_t count, auto first) {
    dot = hn::MulAdd(hn::IfThenElseZero(first, LoadFirst(df, prob + i, count)), LoadFirst(df, dp + i, count), dot);
  });
  const auto total = hn::SumOfLanes(df, dot);
  const auto scale = hn::Set(df, row.scale);
  ForEachVisible(df, row.lo, row.hi, [&](int64_t i, int64_t count, auto) {
    const auto grad = Round<kBf16>(df, hn::Mul(hn::Sub(LoadFirst(df, dp + i, count), total), LoadFirst(df, prob + i, count)));
    StoreFirst(df, Round<kBf16>(df, hn::Mul(grad, scale)), ds + i, count);
  });
  ZeroHidden(row, ds);
}

template <class T>
void LogSumExpRow(const T* HWY_RESTRICT x, int64_t n, float* HWY_RESTRICT lse) {
  const hn::ScalableTag<float> df;
  const auto minus_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  auto max = minus_inf;
  ForEachVisible(df, 0, n, [&](int64_t i, int64_t count, auto first) {
    max = hn::Max(max, hn::IfThenElse(first, LoadFirst(df, x + i, count), minus_inf));
  });
  const auto top = hn::MaxOfLanes(df, max);
  auto sum = hn::Zero(df);
  ForEachVisible(df, 0, n, [&](int64_t i, int64_t count, auto first) {
    sum = hn::Add(sum, hn::IfThenElseZero(first, hn::Exp(df, hn::Sub(LoadFirst(df, x + i, count), top))));
  });
  *lse = hn::GetLane(top) + std::log(hn::GetLane(hn::SumOfLanes(df, sum)));
}

template <class T>
void CrossEntropyGradRow(const T* HWY_RESTRICT x, int64_t n, float lse, int64_t target, float scale,
                         T* HWY_RESTRICT dx) {
  const hn::ScalableTag<float> df;
  const auto shift = hn::Set(df, lse), by = hn::Set(df, scale);
  ForEachVisible(df, 0, n, [&](int64_t i, int64_t count, auto) {
    StoreFirst(df, hn::Mul(hn::Exp(df, hn::Sub(LoadFirst(df, x + i, count), shift)), by), dx + i, count);
  });
  // The target's −scale, on its lane's value as computed above.
  const auto at_target = hn::Mul(hn::Exp(df, hn::Sub(LoadFirst(df, x + target, 1), shift)), by);
  StoreFirst(df, hn::Sub(at_target, by), dx + target, 1);
}

void LogSumExpRowF32(const float* x, int64_t n, float* lse) { LogSumExpRow(x, n, lse); }
void LogSumExpRowBf16(const uint16_t* x, int64_t n, float* lse) { LogSumExpRow(x, n, lse); }
void CrossEntropyGradRowF32(const float* x, int64_t n, float lse, int64_t target, float scale, float* dx) {
  CrossEntropyGradRow(x, n, lse, target, scale, dx);
}
void CrossEntropyGradRowBf16(const uint16_t* x, int64_t n, float lse, int64_t target, float scale, uint16_t* dx) {
  CrossEntropyGradRow(x, n, lse, target, scale, dx);
}

void SoftmaxRowF32(const float* s, const ScoreRow& row, float* p, float* lse, float* work) {
  SoftmaxRow(s, row, p, lse, work);
}
void SoftmaxRowBf16(const uint16_t* s, const ScoreRow& row, uint16_t* p, float* lse, float* work) {
  SoftmaxRow(s, row, p, lse, work);
}
void ProbsRowF32(const float* s, const ScoreRow& row, float lse, float* p) { ProbsRow(s, row, lse, p, nullptr); }
void ProbsRowBf16(const uint16_t* s, const ScoreRow& row, float lse, uint16_t* p, float* p32) {
  ProbsRow(s, row, lse, p, p32);
}
void ScoresGradRowF32(const float* p, const float* dp, const ScoreRow& row, float* ds) { ScoresGradRow(p, dp, row, ds); }
void ScoresGradRowBf16(const float* p32, const uint16_t* dp, const ScoreRow& row, uint16_t* ds) {
  ScoresGradRow(p32, dp, row, ds);
}

}  // namespace HWY_NAMESPACE
}  // namespace zero::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zero::kernels {

HWY_EXPORT(SoftmaxRowF32);
HWY_EXPORT(SoftmaxRowBf16);
HWY_EXPORT(ProbsRowF32);
HWY_EXPORT(ProbsRowBf16);
HWY_EXPORT(ScoresGradRowF32);
HWY_EXPORT(ScoresGradRowBf16);
HWY_EXPORT(LogSumExpRowF32);
HWY_EXPORT(LogSumExpRowBf16);
HWY_EXPORT(CrossEntropyGradRowF32);
HWY_EXPORT(CrossEntropyGradRowBf16);

void attention_softmax_row(const float* s, const ScoreRow& row, float* p, float* lse, float* work) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRowF32)(s, row, p, lse, work);
}
void attention_softmax_row_bf16(const uint16_t* s, const ScoreRow& row, uint16_t* p, float* lse, float* work) {
  HWY_DYNAMIC_DISPATCH(SoftmaxRowBf16)(s, row, p, lse, work);
}
void attention_probs_row(const float* s, const ScoreRow& row, float lse, float* p) {
  HWY_DYNAMIC_DISPATCH(ProbsRowF32)(s, row, lse, p);
}
void attention_probs_row_bf16(const uint16_t* s, const ScoreRow& row, float lse, uint16_t* p, float* p32) {
  HWY_DYNAMIC_DISPATCH(ProbsRowBf16)(s, row, lse, p, p32);
}
void attention_scores_grad_row(const float* p, const float* dp, const ScoreRow& row, float* ds) {
  HWY_DYNAMIC_DISPATCH(ScoresGradRowF32)(p, dp, row, ds);
}
void attention_scores_grad_row_bf16(const float* p32, const uint16_t* dp, const ScoreRow& row, uint16_t* ds) {
  HWY_DYNAMIC_DISPATCH(ScoresGradRowBf16)(p32, dp, row, ds);
}

void log_sum_exp_row(const float* x, int64_t n, float* lse) { HWY_DYNAMIC_DISPATCH(LogSumExpRowF32)(x, n, lse); }
void log_sum_exp_row_bf16(const uint16_t* x, int64_t n, float* lse) {
  HWY_DYNAMIC_DISPATCH(LogSumExpRowBf16)(x, n, lse);
}
void cross_entropy_grad_row(const float* x, int64_t n, float lse, int64_t target, float scale, float* dx) {
  HWY_DYNAMIC_DISPATCH(CrossEntropyGradRowF32)(x, n, lse, target, scale, dx);
}
void cross_entropy_grad_row_bf16(const uint16_t* x, int64_t n, float lse, int64_t target, float scale, uint16_t* dx) {
  HWY_DYNAMIC_DISPATCH(CrossEntropyGradRowBf16)(x, n, lse, target, scale, dx);
}

}  // namespace zero::kernels
#endif  // HWY_ONCE
