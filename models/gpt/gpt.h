// GPT-2 in LibTorch with llm.c's conventions (issue: "The main job"): token embedding wte (Vp×C)
// plus position embedding wpe (maxT×C); L pre-LayerNorm blocks (eps 1e-5, biased variance) of
// causal self-attention with a fused qkv weight (3C×C: rows [0,C) query, [C,2C) key, [2C,3C)
// value; head h owns rows h·hs..(h+1)·hs−1 of each), scores scaled by 1/sqrt(hs), an output
// projection, and an MLP C→4C→C with tanh-GELU; a final LayerNorm; logits = x·wteᵀ (tied), with
// the padded vocabulary rows V..Vp−1 left out of softmax and loss; loss = mean cross-entropy. No
// dropout. Weights are (out, in).
#pragma once

#include <torch/torch.h>

#include <string>

#include "models/gpt/llmc_files.h"
#include "zero/unit.h"

namespace zero::gpt {

struct GptBlock : torch::nn::Module {
  explicit GptBlock(const GptShape& shape);
  at::Tensor forward(const at::Tensor& x);
  int64_t heads;
  at::Tensor ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};

struct Gpt : torch::nn::Module {
  // Initialised as llm.c does: normal(0, 0.02), residual projections scaled by 1/sqrt(2L),
  // LayerNorm weights 1 and biases 0, other biases 0. Uses torch's global RNG.
  explicit Gpt(const GptShape& shape);
  // tokens [B, T] (int64, T <= maxT) → logits [B, T, V] (the padded rows dropped).
  at::Tensor forward(const at::Tensor& tokens);
  // Mean cross-entropy over all B·T positions (zero::linear_cross_entropy: the logits never whole).
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets);
  // The final LayerNorm's output [B, T, C], which the tied output projection turns into logits.
  at::Tensor hidden(const at::Tensor& tokens);

  GptShape shape;
  // Activation checkpointing: blocks 0, k, 2k, ... run under checkpointing::checkpoint, keeping
  // only their inputs and running again in backward (0: none).
  int64_t checkpoint_every = 0;
  at::Tensor wte, wpe, lnfw, lnfb;
  std::vector<std::shared_ptr<zero::Unit<GptBlock>>> blocks;  // stage 3 shards block by block
};

// The activations autograd keeps for one micro-step of `rows` × `seq` tokens (fp32), counted from
// GptBlock::forward's saved tensors: per block and token 16·C + NH + 4 floats (the block input,
// both LayerNorm inputs and outputs, q, k and v made contiguous, the attention's log-sum-exp per
// head, the attention output, the MLP's 4·C input and GELU output, LayerNorm statistics); outside
// the blocks 3·C + 2 floats per token (the final LayerNorm's input, output and statistics, and
// the gradient zero::linear_cross_entropy computed for its input in the forward) and the output
// projection's gradient, V·C floats (no logits are kept).
// With blocks 0, k, 2k, ... checkpointed, each of those keeps only its input (C floats per token)
// and one block's activations exist again while it is recomputed. The peak adds backward's
// working set in one block: the attention's scores, probabilities and their gradient for one
// block of b = min(T, zero::attention_query_block(fp32)) queries (3·NH·b·T floats per row; no [T, T]
// tensor, zero::causal_attention). Compared with the tracking allocator's peak in
// docs/PERFORMANCE.md.
struct ActivationBytes {
  int64_t without_checkpointing = 0, with_checkpointing = 0;  // peaks, the working set included
  int64_t backward_working_set = 0;
};
ActivationBytes gpt_activation_bytes(const GptShape& shape, int64_t rows, int64_t seq, int64_t checkpoint_every);

// Copies an llm.c checkpoint's weights into `model`; an error naming the file and the field when
// the shapes differ.
void load_llmc(Gpt& model, const LlmcCheckpoint& checkpoint, const std::string& origin);
// The model's weights in llm.c's flat order (fp32).
std::vector<float> to_llmc_params(const Gpt& model);

}  // namespace zero::gpt
