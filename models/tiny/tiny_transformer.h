// A small GPT-style transformer for tests and benchmarks: token and position embeddings, pre-norm
// blocks of causal self-attention and a GELU MLP, a final LayerNorm, and logits through the
// token embedding (tied: no separate head).
#pragma once

#include <torch/torch.h>

#include <cmath>

#include "zero/activation_checkpoint.h"
#include "zero/unit.h"

namespace zero::models {

struct TinyTransformerOptions {
  int64_t vocab = 64, channels = 32, heads = 4, layers = 2, max_seq = 16;
  double dropout = 0;            // on the attention probabilities and each block's two branches
  int64_t checkpoint_every = 0;  // blocks 0, k, 2k, ... run under checkpointing::checkpoint (0: none)
};

struct TinyBlock : torch::nn::Module {
  explicit TinyBlock(const TinyTransformerOptions& o) : heads(o.heads), dropout(o.dropout) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.channels})));
    // Note: no qkv bias. Its key third gets an exactly zero gradient (softmax ignores a constant
    // added to a row of scores), so Adam would divide rounding noise by its own size and any
    // change of summation order (more ranks, more micro-steps) would move it by ~lr: useless for
    // equivalence tests, and nothing a model needs.
    qkv = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(o.channels, 3 * o.channels).bias(false)));
    proj = register_module("proj", torch::nn::Linear(o.channels, o.channels));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.channels})));
    fc = register_module("fc", torch::nn::Linear(o.channels, 4 * o.channels));
    out = register_module("out", torch::nn::Linear(4 * o.channels, o.channels));
  }
  at::Tensor forward(const at::Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / heads;
    auto parts = qkv(ln1(x)).split(C, 2);
    auto shape = [&](const at::Tensor& t) { return t.reshape({B, T, heads, hs}).transpose(1, 2); };
    at::Tensor q = shape(parts[0]), k = shape(parts[1]), v = shape(parts[2]);
    at::Tensor scores = q.matmul(k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hs));
    at::Tensor causal = torch::ones({T, T}, torch::kBool).triu(1);
    at::Tensor attention = drop(torch::softmax(scores.masked_fill(causal, -1e9), -1)).matmul(v);
    at::Tensor h = x + drop(proj(attention.transpose(1, 2).reshape({B, T, C})));
    return h + drop(out(torch::gelu(fc(ln2(h)))));
  }
  at::Tensor drop(const at::Tensor& t) { return dropout > 0 && is_training() ? torch::dropout(t, dropout, true) : t; }
  int64_t heads;
  double dropout;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
};

struct TinyTransformer : torch::nn::Module {
  explicit TinyTransformer(const TinyTransformerOptions& o = {}) : options(o) {
    wte = register_module("wte", torch::nn::Embedding(o.vocab, o.channels));
    wpe = register_module("wpe", torch::nn::Embedding(o.max_seq, o.channels));
    for (int64_t l = 0; l < o.layers; ++l)
      blocks.push_back(register_module("h" + std::to_string(l), std::make_shared<zero::Unit<TinyBlock>>(o)));
    lnf = register_module("lnf", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.channels})));
  }
  // tokens [B, T] (int64) → logits [B, T, vocab]
  at::Tensor forward(const at::Tensor& tokens) {
    at::Tensor x = wte(tokens) + wpe(torch::arange(tokens.size(1), torch::kLong));
    x = zero::checkpointing::run_blocks(blocks, x, options.checkpoint_every);
    return lnf(x).matmul(wte->weight.t());
  }
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets) {
    at::Tensor logits = forward(tokens);
    return torch::cross_entropy_loss(logits.reshape({-1, options.vocab}).to(torch::kFloat), targets.reshape(-1));
  }
  TinyTransformerOptions options;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<std::shared_ptr<zero::Unit<TinyBlock>>> blocks;  // stage 3: a unit each
  torch::nn::LayerNorm lnf{nullptr};
};

// A batch with something to learn: each target is an affine function of its token.
inline std::pair<at::Tensor, at::Tensor> tiny_batch(int64_t rows, const TinyTransformerOptions& o, int64_t seed) {
  torch::manual_seed(seed);
  at::Tensor tokens = torch::randint(o.vocab, {rows, o.max_seq}, torch::kLong);
  return {tokens, (tokens * 3 + 1) % o.vocab};
}

}  // namespace zero::models
