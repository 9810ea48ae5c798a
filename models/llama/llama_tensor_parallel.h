// The Llama family under tensor parallelism: which way each weight is split (Megatron's layout:
// llama.h), and the config's AutoTP block checked against it.
#pragma once

#include <string>

#include "models/llama/llama.h"
#include "zero/config.h"

namespace zero::llama {

// How the weight of this Hugging Face name is split over a tensor-parallel group.
// (The engine's names work too: a decoder layer's "block." does not change it.)
Split split_of(const std::string& hf_name);
// The dimension a weight of that split is cut along (-1: whole): rows for column-parallel and
// vocabulary slices, columns for row-parallel ones.
int split_dim(Split split);

// Throws naming the key when the block asks for what the Llama family's split is not: a
// preset_model other than the model's model_type, a layer spec whose pattern matches no parameter,
// or one that asks for a row split of a column-parallel weight (or the reverse, or a norm).
void check_tensor_parallel_config(const TensorParallelConfig& tensor_parallel, const LlamaConfig& model);

}  // namespace zero::llama
