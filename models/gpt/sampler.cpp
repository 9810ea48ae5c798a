#include "models/gpt/sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "models/gpt/gpt.h"
#include "zero/error.h"

namespace zero::gpt {

std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, const SampleOptions& options) {
  return generate([&](const at::Tensor& tokens) { return model.forward(tokens); }, model.shape.max_seq, prompt,
                  options);
}

std::vector<int64_t> generate(const std::function<at::Tensor(const at::Tensor&)>& forward, int64_t max_seq,
                              const std::vector<int64_t>& prompt, const SampleOptions& options) {
  if (prompt.empty()) throw Error("sampling needs a prompt of at least one token", "prompt");
  torch::NoGradGuard no_grad;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  std::vector<int64_t> tokens = prompt;
  for (int64_t i = 0; i < options.tokens; ++i) {
    const int64_t context = std::min<int64_t>(static_cast<int64_t>(tokens.size()), max_seq);
    at::Tensor input = torch::tensor(std::vector<int64_t>(tokens.end() - context, tokens.end()), torch::kLong);
    at::Tensor logits = forward(input.view({1, context}))[0][context - 1].to(torch::kFloat);
    int64_t next = 0;
    if (options.top_k <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      auto [values, indices] = logits.topk(std::min<int64_t>(options.top_k, logits.size(0)));
      at::Tensor probs = torch::softmax(values / options.temperature, 0);
      next = indices[at::multinomial(probs, 1, false, generator).item<int64_t>()].item<int64_t>();
    }
    tokens.push_back(next);
  }
  return tokens;
}

}  // namespace zero::gpt
