#include "models/gpt/gpt.h"

#include <algorithm>
#include <cmath>

#include "zero/activation_checkpoint.h"
#include "zero/compute.h"
#include "zero/error.h"

namespace zero::gpt {
namespace {

// Scaled in place: randn(shape) * std would touch a second tensor's worth of fresh
// memory for the temporary (280 MB at 201 M parameters).
at::Tensor normal(std::vector<int64_t> shape, double std) { return torch::randn(shape).mul_(std); }

// Each per-layer tensor of the file, by name, for block l (llm.c groups tensors by kind across layers).
at::Tensor& block_tensor(GptBlock& b, const std::string& name) {
  if (name == "ln1w") return b.ln1w;
  if (name == "ln1b") return b.ln1b;
  if (name == "qkvw") return b.qkvw;
  if (name == "qkvb") return b.qkvb;
  if (name == "attprojw") return b.attprojw;
  if (name == "attprojb") return b.attprojb;
  if (name == "ln2w") return b.ln2w;
  if (name == "ln2b") return b.ln2b;
  if (name == "fcw") return b.fcw;
  if (name == "fcb") return b.fcb;
  if (name == "fcprojw") return b.fcprojw;
  return b.fcprojb;
}

at::Tensor& root_tensor(Gpt& g, const std::string& name) {
  if (name == "wte") return g.wte;
  if (name == "wpe") return g.wpe;
  if (name == "lnfw") return g.lnfw;
  return g.lnfb;
}

}  // namespace

GptBlock::GptBlock(const GptShape& s) : heads(s.heads) {
  const int64_t C = s.channels;
  const double residual = 0.02 / std::sqrt(2.0 * s.layers);
  ln1w = register_parameter("ln1w", torch::ones({C}));
  ln1b = register_parameter("ln1b", torch::zeros({C}));
  qkvw = register_parameter("qkvw", normal({3 * C, C}, 0.02));
  qkvb = register_parameter("qkvb", torch::zeros({3 * C}));
  attprojw = register_parameter("attprojw", normal({C, C}, residual));
  attprojb = register_parameter("attprojb", torch::zeros({C}));
  ln2w = register_parameter("ln2w", torch::ones({C}));
  ln2b = register_parameter("ln2b", torch::zeros({C}));
  fcw = register_parameter("fcw", normal({4 * C, C}, 0.02));
  fcb = register_parameter("fcb", torch::zeros({4 * C}));
  fcprojw = register_parameter("fcprojw", normal({C, 4 * C}, residual));
  fcprojb = register_parameter("fcprojb", torch::zeros({C}));
}

at::Tensor GptBlock::forward(const at::Tensor& x) {
  namespace F = torch::nn::functional;
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / heads;
  at::Tensor h = F::layer_norm(x, F::LayerNormFuncOptions({C}).weight(compute(ln1w)).bias(compute(ln1b)).eps(1e-5));
  auto qkv = zero::linear(h, qkvw, qkvb).split(C, 2);
  auto by_head = [&](const at::Tensor& t) { return t.reshape({B, T, heads, hs}).transpose(1, 2); };
  at::Tensor q = by_head(qkv[0]), k = by_head(qkv[1]), v = by_head(qkv[2]);
  at::Tensor attended = zero::causal_attention(q, k, v);
  at::Tensor y = x + zero::linear(attended.transpose(1, 2).reshape({B, T, C}), attprojw, attprojb);
  h = F::layer_norm(y, F::LayerNormFuncOptions({C}).weight(compute(ln2w)).bias(compute(ln2b)).eps(1e-5));
  return y + zero::linear(torch::gelu(zero::linear(h, fcw, fcb), "tanh"), fcprojw, fcprojb);
}

Gpt::Gpt(const GptShape& s) : shape(s) {
  wte = register_parameter("wte", normal({s.padded_vocab, s.channels}, 0.02));
  wpe = register_parameter("wpe", normal({s.max_seq, s.channels}, 0.02));
  for (int l = 0; l < s.layers; ++l)
    blocks.push_back(register_module("h" + std::to_string(l), std::make_shared<zero::Unit<GptBlock>>(s)));
  lnfw = register_parameter("lnfw", torch::ones({s.channels}));
  lnfb = register_parameter("lnfb", torch::zeros({s.channels}));
}

at::Tensor Gpt::hidden(const at::Tensor& tokens) {
  namespace F = torch::nn::functional;
  const int64_t T = tokens.size(1);
  // wte is tied: the input embedding and the output projection.
  at::Tensor x = F::embedding(tokens, compute(wte)) + compute(wpe).narrow(0, 0, T);
  x = zero::checkpointing::run_blocks(blocks, x, checkpoint_every);
  return F::layer_norm(x, F::LayerNormFuncOptions({shape.channels}).weight(compute(lnfw)).bias(compute(lnfb)).eps(1e-5));
}

// Only the real vocabulary: the padded rows take no part in softmax or loss.
at::Tensor Gpt::forward(const at::Tensor& tokens) { return zero::linear(hidden(tokens), wte.narrow(0, 0, shape.vocab)); }

at::Tensor Gpt::loss(const at::Tensor& tokens, const at::Tensor& targets) {
  return zero::linear_cross_entropy(hidden(tokens), wte.narrow(0, 0, shape.vocab), targets);
}

ActivationBytes gpt_activation_bytes(const GptShape& s, int64_t rows, int64_t seq, int64_t checkpoint_every) {
  const int64_t tokens = rows * seq;
  const int64_t block = 4 * tokens * (16 * s.channels + s.heads + 4);
  const int64_t input = 4 * tokens * s.channels;
  const int64_t outside = 4 * tokens * (3 * s.channels + 2) + 4 * s.vocab * s.channels;
  ActivationBytes out;
  out.backward_working_set = 3 * 4 * rows * s.heads * std::min<int64_t>(seq, zero::attention_query_block(at::kFloat)) * seq;
  out.without_checkpointing = outside + s.layers * block + out.backward_working_set;
  const int64_t every = checkpoint_every > 0 ? checkpoint_every : 1;
  const int64_t checkpointed = (s.layers + every - 1) / every;
  out.with_checkpointing =
      outside + checkpointed * input + (s.layers - checkpointed) * block + block + out.backward_working_set;
  return out;
}

void load_llmc(Gpt& model, const LlmcCheckpoint& checkpoint, const std::string& origin) {
  const GptShape& s = checkpoint.shape;
  const std::pair<const char*, std::pair<int, int>> fields[] = {
      {"maxT", {s.max_seq, model.shape.max_seq}}, {"V", {s.vocab, model.shape.vocab}},
      {"L", {s.layers, model.shape.layers}},      {"NH", {s.heads, model.shape.heads}},
      {"C", {s.channels, model.shape.channels}},  {"Vp", {s.padded_vocab, model.shape.padded_vocab}}};
  for (const auto& [name, values] : fields) {
    if (values.first != values.second) {
      throw Error(origin + ": header field " + name + " = " + std::to_string(values.first) +
                      " does not match the model's " + std::to_string(values.second),
                  origin);
    }
  }
  torch::NoGradGuard no_grad;
  const at::Tensor flat = torch::from_blob(const_cast<float*>(checkpoint.params.data()),
                                           {static_cast<int64_t>(checkpoint.params.size())}, torch::kFloat);
  for (const TensorSpec& spec : checkpoint_tensors(s)) {
    at::Tensor source = flat.narrow(0, spec.offset, spec.numel()).view(spec.shape);
    if (per_layer(spec)) {
      for (int l = 0; l < s.layers; ++l)
        block_tensor(*model.blocks[static_cast<size_t>(l)]->block, spec.name).copy_(source[l]);
    } else {
      root_tensor(model, spec.name).copy_(source);
    }
  }
}

std::vector<float> to_llmc_params(const Gpt& model) {
  const GptShape& s = model.shape;
  std::vector<float> out(static_cast<size_t>(checkpoint_numel(s)));
  at::Tensor flat = torch::from_blob(out.data(), {static_cast<int64_t>(out.size())}, torch::kFloat);
  Gpt& m = const_cast<Gpt&>(model);
  torch::NoGradGuard no_grad;
  for (const TensorSpec& spec : checkpoint_tensors(s)) {
    at::Tensor target = flat.narrow(0, spec.offset, spec.numel()).view(spec.shape);
    if (per_layer(spec)) {
      for (int l = 0; l < s.layers; ++l) target[l].copy_(block_tensor(*m.blocks[static_cast<size_t>(l)]->block, spec.name));
    } else {
      target.copy_(root_tensor(m, spec.name));
    }
  }
  return out;
}

}  // namespace zero::gpt
