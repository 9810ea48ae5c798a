// The fused CPU kernels (src/kernels/) against the LibTorch ops they replace, values and
// gradients, at sizes with ragged tails (not a multiple of any vector's lanes).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "zero/compute.h"

namespace {

// Inputs of `n` elements spanning silu's regimes: typical activations, large magnitudes (e^−g
// past float's range on both sides), zeros and a subnormal.
at::Tensor inputs(int64_t n, uint64_t seed, at::ScalarType dtype) {
  torch::manual_seed(seed);
  at::Tensor x = torch::randn({n}) * 3;
  const float special[] = {0.0f, -0.0f, 120.0f, -120.0f, 89.0f, -89.0f, 1e-40f, -30.0f, 30.0f};
  for (int64_t i = 0; i < std::min<int64_t>(n, 9); ++i) x[i * (n / 9)] = special[i];
  return x.to(dtype);
}

struct Result {
  at::Tensor out, dgate, dup;
};

Result run(const at::Tensor& gate_in, const at::Tensor& up_in, const at::Tensor& dout, bool fused) {
  const at::Tensor gate = gate_in.clone().requires_grad_(true), up = up_in.clone().requires_grad_(true);
  const at::Tensor out = fused ? zero::swiglu(gate, up) : torch::silu(gate) * up;
  out.backward(dout);
  return {out.detach(), gate.grad(), up.grad()};
}

// Units in the last place of bf16 between two bf16 tensors (their bit patterns as integers).
int64_t max_bf16_ulps(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor ia = a.view(at::kShort).to(at::kInt), ib = b.view(at::kShort).to(at::kInt);
  return (ia - ib).abs().max().item<int64_t>();
}

}  // namespace

// fp32: within 2 ulps of LibTorch's silu · up (relative 1e-6 where the values are not tiny): the
// kernels compute LibTorch's expressions in its order; only e^x (Highway's, ≤ 1 ulp, against
// Sleef's) differs.
TEST(FusedKernels, SwiGluMatchesLibTorchInFp32) {
  for (int64_t n : {1, 7, 17, 1000, 40003, 70001}) {  // tails; more than one chunk of 32768
    const at::Tensor gate = inputs(n, 1, at::kFloat), up = inputs(n, 2, at::kFloat), dout = inputs(n, 3, at::kFloat);
    const Result want = run(gate, up, dout, false), got = run(gate, up, dout, true);
    for (const auto& [name, a, b] : {std::tuple{"out", got.out, want.out}, std::tuple{"dgate", got.dgate, want.dgate},
                                     std::tuple{"dup", got.dup, want.dup}}) {
      ASSERT_FALSE(a.isnan().any().item<bool>()) << name << " n " << n;
      const double error = ((a - b).abs() / (b.abs() + 1e-30)).masked_fill(b.abs() <= 1e-30, 0).max().item<double>();
      EXPECT_LE(error, 1e-6) << name << " n " << n;
      EXPECT_TRUE(((a == 0) == (b == 0)).all().item<bool>()) << name << " n " << n << ": zeros where LibTorch's are";
    }
  }
}

// bf16: LibTorch 1.13's bf16 silu and silu_backward round every intermediate to bf16, and the
// product and its gradients once; the kernels round at the same places, so the results are
// LibTorch's bit for bit but where an e^x differing in its last fp32 bit moves a rounding (at
// most 1 bf16 ulp, in at most 1 element in 1000).
TEST(FusedKernels, SwiGluMatchesLibTorchInBf16) {
  for (int64_t n : {1, 9, 31, 1000, 40003, 70001}) {
    const at::Tensor gate = inputs(n, 4, at::kBFloat16), up = inputs(n, 5, at::kBFloat16),
                     dout = inputs(n, 6, at::kBFloat16);
    const Result want = run(gate, up, dout, false), got = run(gate, up, dout, true);
    for (const auto& [name, a, b] : {std::tuple{"out", got.out, want.out}, std::tuple{"dgate", got.dgate, want.dgate},
                                     std::tuple{"dup", got.dup, want.dup}}) {
      EXPECT_LE(max_bf16_ulps(a, b), 1) << name << " n " << n;
      const int64_t differ = a.ne(b).sum().item<int64_t>();
      EXPECT_LE(differ, std::max<int64_t>(1, n / 1000)) << name << " n " << n;
    }
  }
}

// Where it does not fuse (another dtype, a broadcast), it is LibTorch's ops exactly.
TEST(FusedKernels, SwiGluFallsBackToLibTorch) {
  const at::Tensor gate = torch::randn({4, 6}, torch::kDouble), up = torch::randn({4, 6}, torch::kDouble);
  EXPECT_TRUE(zero::swiglu(gate, up).equal(torch::silu(gate) * up));
  const at::Tensor g = torch::randn({4, 6}), u = torch::randn({6});
  EXPECT_TRUE(zero::swiglu(g, u).equal(torch::silu(g) * u));
}

// Several threads split a large tensor into chunks (kernels::in_chunks): every element's bits are
// the one-thread run's, in both dtypes, forward and backward.
TEST(FusedKernels, SwiGluGivesTheSameBitsOnAnyNumberOfThreads) {
  const int threads = at::get_num_threads();
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const int64_t n = 3 * 32768 + 11;  // three chunks and a ragged fourth
    const at::Tensor gate = inputs(n, 7, dtype), up = inputs(n, 8, dtype), dout = inputs(n, 9, dtype);
    at::set_num_threads(1);
    const Result one = run(gate, up, dout, true);
    at::set_num_threads(3);
    const Result three = run(gate, up, dout, true);
    at::set_num_threads(threads);
    EXPECT_TRUE(one.out.equal(three.out)) << dtype;
    EXPECT_TRUE(one.dgate.equal(three.dgate)) << dtype;
    EXPECT_TRUE(one.dup.equal(three.dup)) << dtype;
  }
}
