// The Llama family as zero-train's loop sees it (models/common/trainable_model.h): built from a
// Hugging Face model directory under zero::Init (stage 3: each decoder layer keeps only this
// rank's shard as soon as it is read), exported as a Hugging Face directory.
#pragma once

#include <memory>
#include <string>

#include "models/common/pipeline_stages.h"
#include "models/common/trainable_model.h"
#include "models/llama/hf_model_dir.h"
#include "models/llama/lora_options.h"

namespace zero {
class Config;
}

namespace zero {
class ParallelGrid;
}

namespace zero::llama {

struct LlamaExportOptions {
  uint64_t max_shard_bytes = 0;  // 0: one model.safetensors
};

// `hf` must stay alive while the model is built (this call); its files are read then.
// `partitioned`: at stage 3, built under zero::Init (each rank keeps its shards, in host memory);
// false builds it whole, for a model that moves to a GPU before the engine partitions it.
// `grid`: tensor parallelism's groups (each rank builds its slices; `world` is then the
// data-parallel group), or null. `lora.enabled`: LoRA adapters on a frozen base (lora.h); the
// model then exports the adapter (adapter_model.safetensors, adapter_config.json), not the weights.
std::unique_ptr<models::TrainableModel> make_llama(const HfModel& hf, const Config& config, World& world,
                                                   const LlamaExportOptions& export_options = {},
                                                   bool partitioned = true, ParallelGrid* grid = nullptr,
                                                   const LoraOptions& lora = {});

// The layer list pipeline parallelism cuts into stages: the embedding ("Embedding"), each decoder
// layer ("LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer"), the final norm with
// lm_head ("LMHead"), with their parameter counts; and the stages `bounds` make of it, as
// zero-train prints them ("stage 0: embedding, layers 0-2 (N parameters); stage 1: ...").
std::vector<pipeline::Item> pipeline_items(const LlamaConfig& config);
std::string describe_pipeline_stages(const LlamaConfig& config, const std::vector<int>& bounds);

// The training dtype the engine will use for `config` (bf16, fp16, or fp32).
at::ScalarType llama_training_dtype(const Config& config);

// Model FLOPs per token (a multiply-add counts 2): forward 2·(the matmul weights) plus attention's
// two T×T products over all query heads (4·T·H·D per layer: the whole score matrix is computed,
// then masked); backward twice the forward.
double llama_flops_per_token(const LlamaConfig& config, int64_t seq);

// The config's expert_parallel block against the model: it has experts, the preset names its
// type, and autoep_size divides them.
void check_expert_parallel_config(const ExpertParallelConfig& expert_parallel, const LlamaConfig& model);

}  // namespace zero::llama
