// LoRA adapters on a Llama-family model, as PEFT makes them (docs/lora.md):
//   a targeted linear layer computes  base(x) + lora_B(lora_A(dropout(x))) · scaling,
//   scaling = alpha / r (or alpha / √r with rsLoRA), lora_A Kaiming-uniform (a = √5), lora_B zero;
// every base weight frozen (no gradient, no optimizer state), the adapters and the modules to save
// trainable; saved as PEFT saves them (adapter_config.json + adapter_model.safetensors, keys
// "base_model.model.<module>.lora_A.weight", whole whatever the ZeRO stage).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/llama/llama.h"
#include "models/llama/lora_config.h"

namespace zero {
class Engine;
class World;
}  // namespace zero

namespace zero::llama {

// Adds the adapters to `model` (each rank alike: lora_A drawn from `options.seed`, or read from
// options.adapter_dir, whose tensors must all be used and fit this model) and freezes everything
// else but the modules to save. Returns the spec. Nothing matching a target, a tied lm_head to
// save, or a model with tensor/pipeline/expert parallelism: an error naming it.
LoraSpec attach_lora(LlamaForCausalLM& model, const LoraOptions& options);

// Collective: every rank calls it. Rank 0 writes DIR/adapter_model.safetensors (the engine's
// trainable parameters, gathered whole one stage-3 unit at a time) and DIR/adapter_config.json;
// `base_dir` goes into base_model_name_or_path. Every rank throws if rank 0 failed.
void write_peft_adapter(Engine& engine, const LoraSpec& spec, const std::string& base_dir, const std::string& dir,
                        World& world);

// Collective: the adapter into DIR/adapter (write_peft_adapter), then rank 0 merges it into the
// base at `base_dir` as a Hugging Face model in DIR (lora_merge.h). Every rank throws if rank 0 failed.
void write_merged_model(Engine& engine, const LoraSpec& spec, const std::string& base_dir, const std::string& dir,
                        World& world);

}  // namespace zero::llama
