// An independent computation of the GPT's loss straight from an llm.c checkpoint's flat weights,
// written differently from models/gpt on purpose (explicit formulas, loops over heads and
// positions; double precision, or fp32 for the bf16 compute test), for the tests that check the
// model and the trainer against it.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "models/gpt/llmc_files.h"

namespace zero::gpt::by_hand {

// The loss of an llm.c model from its flat weights (a tensor in llm.c's order), in plain tensor
// arithmetic in the weights' dtype; differentiable, so it also gives a reference gradient.
// `output` (defined): the output projection's copy of the tied wte, so that the gradients of the
// two uses can be told apart.
inline at::Tensor reference_loss_tensor(const at::Tensor& flat, const GptShape& s, const at::Tensor& tokens,
                                        const at::Tensor& targets, const at::Tensor& output = {}) {
  std::map<std::string, at::Tensor> w;
  for (const auto& spec : checkpoint_tensors(s))
    w[spec.name] = flat.narrow(0, spec.offset, spec.numel()).view(spec.shape);
  const int64_t B = tokens.size(0), T = tokens.size(1), C = s.channels, hs = C / s.heads;
  auto norm = [](const at::Tensor& x, const at::Tensor& g, const at::Tensor& b) {
    at::Tensor mean = x.mean(-1, true);
    at::Tensor var = ((x - mean) * (x - mean)).mean(-1, true);  // biased
    return (x - mean) / torch::sqrt(var + 1e-5) * g + b;
  };
  at::Tensor x = w["wte"].index_select(0, tokens.reshape(-1)).view({B, T, C}) + w["wpe"].narrow(0, 0, T);
  for (int64_t l = 0; l < s.layers; ++l) {
    at::Tensor h = norm(x, w["ln1w"][l], w["ln1b"][l]);
    at::Tensor qkv = h.matmul(w["qkvw"][l].t()) + w["qkvb"][l];
    at::Tensor attended = torch::zeros({B, T, C}, flat.options().requires_grad(false));
    for (int64_t head = 0; head < s.heads; ++head) {
      at::Tensor q = qkv.narrow(2, head * hs, hs), k = qkv.narrow(2, C + head * hs, hs),
                 v = qkv.narrow(2, 2 * C + head * hs, hs);
      for (int64_t t = 0; t < T; ++t) {
        at::Tensor scores = (k.narrow(1, 0, t + 1) * q.narrow(1, t, 1)).sum(-1) / std::sqrt(double(hs));  // [B, t+1]
        at::Tensor weights = torch::exp(scores - std::get<0>(scores.max(1, true)));
        weights = weights / weights.sum(1, true);
        attended.narrow(1, t, 1)
            .narrow(2, head * hs, hs)
            .copy_((weights.unsqueeze(2) * v.narrow(1, 0, t + 1)).sum(1, true));
      }
    }
    x = x + attended.matmul(w["attprojw"][l].t()) + w["attprojb"][l];
    h = norm(x, w["ln2w"][l], w["ln2b"][l]);
    at::Tensor u = h.matmul(w["fcw"][l].t()) + w["fcb"][l];
    u = 0.5 * u * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
    x = x + u.matmul(w["fcprojw"][l].t()) + w["fcprojb"][l];
  }
  x = norm(x, w["lnfw"], w["lnfb"]);
  at::Tensor logits = x.matmul((output.defined() ? output : w["wte"]).narrow(0, 0, s.vocab).t()).view({B * T, s.vocab});
  at::Tensor top = std::get<0>(logits.max(1, true));
  at::Tensor log_sum_exp = top.squeeze(1) + torch::log(torch::exp(logits - top).sum(1));
  at::Tensor picked = logits.gather(1, targets.reshape({-1, 1})).squeeze(1);
  return (log_sum_exp - picked).mean();
}

// The same in double precision, from the fp32 values of a checkpoint.
inline double reference_loss(const std::vector<float>& params, const GptShape& s, const at::Tensor& tokens,
                             const at::Tensor& targets) {
  at::Tensor flat =
      torch::from_blob(const_cast<float*>(params.data()), {static_cast<int64_t>(params.size())}, torch::kFloat)
          .to(torch::kDouble);
  return reference_loss_tensor(flat, s, tokens, targets).item<double>();
}

}  // namespace zero::gpt::by_hand
