// The GPT's FLOPs per token, exactly as models/gpt/gpt.cpp computes them (a multiply-add counts
// 2): per block the four weight matmuls (qkv 6C², projection 2C², MLP 16C²) and attention's two
// T×T matmuls over all heads (4·C·T: the whole score matrix is computed, then masked), and the
// logits against the real vocabulary (2·C·V). Backward is twice the forward (a gradient for the
// input and one for the weight, or for both operands of attention's matmuls). That is PaLM's
// 6N + 12·L·C·T model FLOPs per token, N counting the matmul weights (biases, LayerNorms and
// softmax left out, as there). Recomputation under activation checkpointing is hardware work,
// counted apart. Torch-free.
#pragma once

#include <cstdint>

#include "models/gpt/llmc_files.h"

namespace zero::gpt {

struct GptFlops {
  double forward = 0, backward = 0;  // model FLOPs per token
  double recompute = 0;              // per token: the checkpointed blocks' forward run again
};

// For rows of `seq` tokens; blocks 0, k, 2k, ... checkpointed for checkpoint_every = k > 0.
GptFlops gpt_flops_per_token(const GptShape& shape, int64_t seq, int64_t checkpoint_every);

}  // namespace zero::gpt
