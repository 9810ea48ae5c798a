// Text from the GPT: greedy or top-k sampling, one token at a time (no cache: the samples the
// trainer prints are short). Deterministic for a seed, so every rank draws the same tokens —
// which keeps ranks in lockstep when the forward pass is collective (stage 3).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace zero::gpt {

struct Gpt;

struct SampleOptions {
  int64_t tokens = 64;  // new tokens to generate
  int64_t top_k = 0;    // 0: greedy (argmax); k > 0: sample among the k most likely
  double temperature = 1.0;
  uint64_t seed = 0;
};

// `prompt` followed by the new tokens; the context is the last `max_seq` tokens. `logits` maps
// tokens [1, T] to logits [1, T, V] (any model's forward).
std::vector<int64_t> generate(const std::function<at::Tensor(const at::Tensor&)>& logits, int64_t max_seq,
                              const std::vector<int64_t>& prompt, const SampleOptions& options);
std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, const SampleOptions& options);

}  // namespace zero::gpt
