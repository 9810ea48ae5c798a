// The fused CPU kernels (src/kernels/) against the LibTorch ops they replace, values and
// gradients, at sizes with ragged tails (not a multiple of any vector's lanes).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "zero/compute.h"
#include "zero/error.h"

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

namespace {

struct Attended {
  at::Tensor out, dq, dk, dv;
};

// transformers' eager attention (repeat_kv, masked fp32 softmax), written here on its own: the
// reference zero::causal_attention's blocks must reproduce.
at::Tensor eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t window) {
  const int64_t T = q.size(2), G = q.size(1) / k.size(1);
  const at::Tensor keys = k.repeat_interleave(G, 1), values = v.repeat_interleave(G, 1);
  const at::Tensor scores = q.matmul(keys.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(3))));
  const at::Tensor position = torch::arange(T);
  const at::Tensor back = position.unsqueeze(1) - position.unsqueeze(0);  // query − key
  const at::Tensor hidden = back < 0 | (window > 0 ? back >= window : torch::zeros_like(back, torch::kBool));
  const at::ScalarType softmax_dtype = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return torch::softmax(scores.masked_fill(hidden, -INFINITY), -1, softmax_dtype).to(q.scalar_type()).matmul(values);
}

template <class Attention>
Attended attend(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, const at::Tensor& dout,
                Attention attention) {
  const at::Tensor q = q_in.clone().requires_grad_(true), k = k_in.clone().requires_grad_(true),
                   v = v_in.clone().requires_grad_(true);
  const at::Tensor out = attention(q, k, v);
  out.backward(dout);
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// max |a − b| over max |b|, in double.
double relative_error(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b).abs().max().item<double>() / b.abs().max().item<double>();
}

// ‖a − b‖₂ over ‖b‖₂, in double: bf16's error over the whole tensor, where single elements'
// roundings would decide a largest-element measure.
double rms_error(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b).norm().item<double>() / b.norm().item<double>();
}

struct AttentionCase {
  int64_t B, H, KV, T, D, window, block;
};

// Ragged blocks (T not a multiple of the block), three query heads per key/value head, a window
// shorter and longer than a block, one block, and a head size whose 1/√D is inexact in bf16.
const AttentionCase kAttentionCases[] = {
    {2, 6, 2, 77, 16, 0, 32}, {2, 6, 2, 77, 16, 20, 32}, {1, 6, 2, 77, 16, 50, 16},
    {1, 4, 4, 45, 24, 0, 0},  {1, 6, 2, 100, 8, 0, 7},
};

at::Tensor attention_input(std::vector<int64_t> shape, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn(shape, torch::kDouble) * 2;  // scores of a few units: softmax far from uniform
}

}  // namespace

// fp32: values and gradients within 1e-5 (relative to the tensor's largest) of the eager
// attention computed in fp64 from the same inputs.
TEST(FusedKernels, AttentionMatchesEagerAttentionInFp32) {
  for (const AttentionCase& c : kAttentionCases) {
    const at::Tensor q = attention_input({c.B, c.H, c.T, c.D}, 1), k = attention_input({c.B, c.KV, c.T, c.D}, 2),
                     v = attention_input({c.B, c.KV, c.T, c.D}, 3), dout = attention_input({c.B, c.H, c.T, c.D}, 4);
    const Attended want = attend(q, k, v, dout, [&](auto& q, auto& k, auto& v) { return eager_attention(q, k, v, c.window); });
    const Attended got = attend(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), dout.to(at::kFloat),
                                [&](auto& q, auto& k, auto& v) { return zero::causal_attention(q, k, v, c.window, c.block); });
    const std::string label = "T " + std::to_string(c.T) + " window " + std::to_string(c.window) + " block " +
                              std::to_string(c.block);
    EXPECT_LE(relative_error(got.out, want.out), 1e-5) << "out " << label;
    EXPECT_LE(relative_error(got.dq, want.dq), 1e-5) << "dq " << label;
    EXPECT_LE(relative_error(got.dk, want.dk), 1e-5) << "dk " << label;
    EXPECT_LE(relative_error(got.dv, want.dv), 1e-5) << "dv " << label;
  }
}

// bf16: rounding to bf16 (scores, probabilities, products, gradients) costs LibTorch's own bf16
// ops an error of about 2^-7 (RMS, relative) against fp64 from the same inputs. The blocks round
// at the same places, plus once per block's share of the key and value gradients before their fp32
// sum, so they must be as close to fp64 as LibTorch's bf16 eager attention is, with 10% slack
// (measured: 0.93–1.03× LibTorch's error, up to 15 blocks; one block gives its error exactly).
TEST(FusedKernels, AttentionInBf16IsAsAccurateAsLibTorchsOps) {
  for (const AttentionCase& c : kAttentionCases) {
    const at::Tensor q = attention_input({c.B, c.H, c.T, c.D}, 5), k = attention_input({c.B, c.KV, c.T, c.D}, 6),
                     v = attention_input({c.B, c.KV, c.T, c.D}, 7), dout = attention_input({c.B, c.H, c.T, c.D}, 8);
    const auto bf16 = [](const at::Tensor& t) { return t.to(at::kBFloat16); };
    // The exact answer for the inputs as bf16 holds them.
    const Attended exact = attend(bf16(q).to(at::kDouble), bf16(k).to(at::kDouble), bf16(v).to(at::kDouble),
                                  bf16(dout).to(at::kDouble),
                                  [&](auto& q, auto& k, auto& v) { return eager_attention(q, k, v, c.window); });
    const Attended libtorch = attend(bf16(q), bf16(k), bf16(v), bf16(dout),
                                     [&](auto& q, auto& k, auto& v) { return eager_attention(q, k, v, c.window); });
    const Attended got = attend(bf16(q), bf16(k), bf16(v), bf16(dout),
                                [&](auto& q, auto& k, auto& v) { return zero::causal_attention(q, k, v, c.window, c.block); });
    const std::string label = "T " + std::to_string(c.T) + " window " + std::to_string(c.window) + " block " +
                              std::to_string(c.block);
    for (const auto& [name, a, b, want] :
         {std::tuple{"out", got.out, libtorch.out, exact.out}, std::tuple{"dq", got.dq, libtorch.dq, exact.dq},
          std::tuple{"dk", got.dk, libtorch.dk, exact.dk}, std::tuple{"dv", got.dv, libtorch.dv, exact.dv}}) {
      const double ours = rms_error(a, want), theirs = rms_error(b, want);
      EXPECT_LE(ours, 1.1 * theirs) << name << " " << label << ": LibTorch's bf16 error " << theirs;
    }
  }
}

// With the fused kernels off, or for a dtype they do not take, it is the eager attention.
TEST(FusedKernels, AttentionFallsBackToEagerAttention) {
  const at::Tensor q = attention_input({1, 4, 9, 8}, 9), k = attention_input({1, 2, 9, 8}, 10),
                   v = attention_input({1, 2, 9, 8}, 11);
  EXPECT_TRUE(torch::allclose(zero::causal_attention(q, k, v, 4), eager_attention(q, k, v, 4), 1e-12, 1e-12));
  EXPECT_THROW(zero::causal_attention(q, k.narrow(1, 0, 1).repeat({1, 3, 1, 1}), v), zero::Error);
}

namespace {

struct LossResult {
  at::Tensor loss, dh, dw;
};

// Rows of h [N, C] against w [V, C]: logits of a few units; some targets ignored (-100).
struct LossInputs {
  at::Tensor h, w, targets;
};
LossInputs loss_inputs(int64_t N, int64_t C, int64_t V, uint64_t seed) {
  torch::manual_seed(seed);
  LossInputs in{torch::randn({N, C}, torch::kDouble), torch::randn({V, C}, torch::kDouble) * 0.5,
                torch::randint(V, {N}, torch::kLong)};
  for (int64_t i = 3; i < N; i += 7) in.targets[i] = -100;
  in.targets[0] = 0, in.targets[1] = V - 1;  // the vocabulary's ends
  return in;
}

template <class Loss>
LossResult loss_of(const at::Tensor& h_in, const at::Tensor& w_in, Loss loss_fn) {
  const at::Tensor h = h_in.clone().requires_grad_(true), w = w_in.clone().requires_grad_(true);
  const at::Tensor loss = loss_fn(h, w);
  (loss * 3).backward();  // an upstream gradient other than 1
  return {loss.detach(), h.grad(), w.grad()};
}

}  // namespace

// fp32: the chunked loss (ragged chunks, ignored rows, mean and sum) against cross_entropy_loss on
// the whole logits in fp64, values and gradients within 1e-5 relative.
TEST(FusedKernels, LinearCrossEntropyMatchesTheWholeLogitsInFp32) {
  const LossInputs in = loss_inputs(37, 24, 301, 12);
  for (const bool mean : {true, false}) {
    for (const int64_t chunk : {int64_t{8}, int64_t{0}}) {
      const LossResult want = loss_of(in.h, in.w, [&](auto& h, auto& w) {
        return zero::eager_linear_cross_entropy(h, w, in.targets, mean, -100);
      });
      const LossResult got = loss_of(in.h.to(at::kFloat), in.w.to(at::kFloat), [&](auto& h, auto& w) {
        return zero::linear_cross_entropy(h, w, in.targets, mean, -100, chunk);
      });
      EXPECT_LE(relative_error(got.loss, want.loss), 1e-5) << "mean " << mean << " chunk " << chunk;
      EXPECT_LE(relative_error(got.dh, want.dh), 1e-5) << "mean " << mean << " chunk " << chunk;
      EXPECT_LE(relative_error(got.dw, want.dw), 1e-5) << "mean " << mean << " chunk " << chunk;
      EXPECT_TRUE(got.dh[3].eq(0).all().item<bool>()) << "an ignored row has no gradient";
    }
  }
}

// bf16 (logits in bf16, the loss in fp32 from them): as close to the fp64 answer for the same bf16
// inputs as LibTorch's bf16 linear + fp32 cross-entropy, with 10 % slack for the loss and 30 % for
// the gradients. Those are computed in the forward for an upstream gradient of 1, and multiplying
// them by this test's 3 rounds h's once more (measured 1.21× LibTorch's error; a loss scale or
// 1/accumulation that is a power of two multiplies exactly); w's takes one more rounding per
// chunk's share before the fp32 sum (1.14× with 5 chunks of 8 rows).
TEST(FusedKernels, LinearCrossEntropyInBf16IsAsAccurateAsLibTorchsOps) {
  const LossInputs in = loss_inputs(37, 24, 301, 13);
  const at::Tensor h = in.h.to(at::kBFloat16), w = in.w.to(at::kBFloat16);
  for (const int64_t chunk : {int64_t{8}, int64_t{0}}) {
    const LossResult exact = loss_of(h.to(at::kDouble), w.to(at::kDouble), [&](auto& h, auto& w) {
      return zero::eager_linear_cross_entropy(h, w, in.targets);
    });
    const LossResult libtorch =
        loss_of(h, w, [&](auto& h, auto& w) { return zero::eager_linear_cross_entropy(h, w, in.targets); });
    const LossResult got =
        loss_of(h, w, [&](auto& h, auto& w) { return zero::linear_cross_entropy(h, w, in.targets, true, -100, chunk); });
    for (const auto& [name, a, b, want] : {std::tuple{"loss", got.loss, libtorch.loss, exact.loss},
                                           std::tuple{"dh", got.dh, libtorch.dh, exact.dh},
                                           std::tuple{"dw", got.dw, libtorch.dw, exact.dw}}) {
      const double ours = rms_error(a, want), theirs = rms_error(b, want);
      const double slack = std::string(name) == "loss" ? 1.1 : 1.3;
      EXPECT_LE(ours, slack * theirs + 1e-6) << name << " chunk " << chunk << ": LibTorch's bf16 error " << theirs;
    }
  }
}

// A target outside the vocabulary is an error naming it, as cross_entropy_loss's is.
TEST(FusedKernels, LinearCrossEntropyRefusesATargetOutsideTheVocabulary) {
  const at::Tensor h = torch::randn({4, 8}), w = torch::randn({10, 8});
  EXPECT_THROW(zero::linear_cross_entropy(h, w, torch::tensor({1, 2, 10, 3}, torch::kLong)), zero::Error);
  EXPECT_NO_THROW(zero::linear_cross_entropy(h, w, torch::tensor({1, 2, -100, 3}, torch::kLong)));
}

namespace {

struct NormResult {
  at::Tensor y, dx, dw;
};

template <class Norm>
NormResult norm_of(const at::Tensor& x_in, const at::Tensor& w_in, const at::Tensor& dy, Norm norm) {
  const at::Tensor x = x_in.clone().requires_grad_(true), w = w_in.clone().requires_grad_(true);
  const at::Tensor y = norm(x, w);
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad()};
}

}  // namespace

// fp32: values and gradients within 1e-5 relative of LibTorch's ops in fp64, rows of a ragged
// width and more rows than one thread's task (64) in several tasks' weight-gradient sums.
TEST(FusedKernels, RmsNormMatchesLibTorchInFp32) {
  torch::manual_seed(14);
  for (const int64_t C : {7, 100, 576}) {
    const at::Tensor x = torch::randn({3, 70, C}, torch::kDouble) * 3, w = torch::randn({C}, torch::kDouble),
                     dy = torch::randn({3, 70, C}, torch::kDouble);
    const NormResult want = norm_of(x, w, dy, [](auto& x, auto& w) { return zero::eager_rms_norm(x, w, 1e-5); });
    const NormResult got = norm_of(x.to(at::kFloat), w.to(at::kFloat), dy.to(at::kFloat),
                                   [](auto& x, auto& w) { return zero::rms_norm(x, w, 1e-5); });
    EXPECT_LE(relative_error(got.y, want.y), 1e-5) << C;
    EXPECT_LE(relative_error(got.dx, want.dx), 1e-5) << C;
    EXPECT_LE(relative_error(got.dw, want.dw), 1e-5) << C;
  }
}

// bf16: the kernels round where LibTorch's bf16 ops round, so y is LibTorch's but where the sum
// of squares in another order moves a rounding (within 1 bf16 ulp in at most 1 % of the
// elements). x's gradient is two fp32 terms that nearly cancel, and w's a sum over 210 rows'
// rounded products, both in another order than LibTorch's: as close to fp64 as LibTorch's own
// (RMS, 10% slack).
TEST(FusedKernels, RmsNormMatchesLibTorchInBf16) {
  torch::manual_seed(15);
  for (const int64_t C : {7, 100, 576}) {
    const at::Tensor x = (torch::randn({3, 70, C}) * 3).to(at::kBFloat16), w = torch::randn({C}).to(at::kBFloat16),
                     dy = torch::randn({3, 70, C}).to(at::kBFloat16);
    const NormResult want = norm_of(x, w, dy, [](auto& x, auto& w) { return zero::eager_rms_norm(x, w, 1e-5); });
    const NormResult got = norm_of(x, w, dy, [](auto& x, auto& w) { return zero::rms_norm(x, w, 1e-5); });
    const NormResult exact = norm_of(x.to(at::kDouble), w.to(at::kDouble), dy.to(at::kDouble),
                                     [](auto& x, auto& w) { return zero::eager_rms_norm(x, w, 1e-5); });
    EXPECT_LE(max_bf16_ulps(got.y, want.y), 1) << "y C " << C;
    EXPECT_LE(got.y.ne(want.y).sum().item<int64_t>(), std::max<int64_t>(1, got.y.numel() / 100)) << "y C " << C;
    EXPECT_LE(rms_error(got.dx, exact.dx), 1.1 * rms_error(want.dx, exact.dx) + 1e-6) << "dx C " << C;
    EXPECT_LE(rms_error(got.dw, exact.dw), 1.1 * rms_error(want.dw, exact.dw) + 1e-6) << "dw C " << C;
  }
}

// Rotary embedding on heads viewed out of a projection's [B, T, n, D] output (strided), at a head
// size whose half is not a multiple of any vector's lanes and at Llama's 64: every product and sum
// is one rounded operation as in LibTorch's ops, so values and gradients are LibTorch's bit for bit
// in fp32 and bf16, and the gradient comes back in x's layout.
TEST(FusedKernels, RotaryEmbeddingIsLibTorchsBitForBit) {
  torch::manual_seed(16);
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (const int64_t D : {24, 64}) {
      const int64_t B = 2, T = 19, n = 3;
      const at::Tensor angles = torch::rand({T, D}) * 20;
      const at::Tensor cos = angles.cos().to(dtype), sin = angles.sin().to(dtype);
      const at::Tensor projected = (torch::randn({B, T, n * D}) * 3).to(dtype);
      const at::Tensor dout = torch::randn({B, n, T, D}).to(dtype);
      at::Tensor grads[2], outs[2];
      for (const bool fused : {false, true}) {
        const at::Tensor p = projected.clone().requires_grad_(true);
        const at::Tensor x = p.view({B, T, n, D}).transpose(1, 2);
        const at::Tensor out = fused ? zero::rotary_embedding(x, cos, sin) : zero::eager_rotary_embedding(x, cos, sin);
        out.backward(dout);
        outs[fused] = out.detach();
        grads[fused] = p.grad();
      }
      EXPECT_TRUE(outs[1].equal(outs[0])) << dtype << " D " << D << " max diff " << (outs[1].to(at::kDouble) - outs[0].to(at::kDouble)).abs().max().item<double>() << " count " << outs[1].ne(outs[0]).sum().item<int64_t>();
      EXPECT_TRUE(grads[1].equal(grads[0])) << dtype << " D " << D;
      EXPECT_TRUE(outs[1].is_contiguous());
    }
  }
}
