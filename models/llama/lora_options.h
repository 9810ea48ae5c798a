// LoRA's settings as TRL's and PEFT's users write them (TRL's ModelConfig flags, PEFT's
// LoraConfig keys), torch-free so the trainers' option structs can carry them (docs/lora.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zero::llama {

struct LoraOptions {
  bool enabled = false;  // --use_peft
  int64_t r = 16;        // --lora_r (TRL's default)
  double alpha = 32;     // --lora_alpha
  double dropout = 0.05;  // --lora_dropout: on the adapter's input only
  // --lora_target_modules: module names (a module matches when its name is one, or ends in "." +
  // one), or the one word "all-linear" (every linear layer but lm_head). Empty: PEFT's default for
  // the Llama family, q_proj and v_proj.
  std::vector<std::string> target_modules;
  bool use_rslora = false;  // --use_rslora: scale alpha/√r instead of alpha/r
  // --lora_modules_to_save: whole modules trained beside the adapters (lm_head, embed_tokens).
  std::vector<std::string> modules_to_save;
  // --adapter_name_or_path: continue training this PEFT adapter directory (its adapter_config.json
  // then decides r, alpha, the targets, ... as PeftModel.from_pretrained(is_trainable=True) does).
  std::string adapter_dir;
  uint64_t seed = 42;  // lora_A's initialisation (the same on every rank)
  // --merge_adapter: the run's final export is the base with the adapter merged (a Hugging Face
  // model), the adapter itself in its adapter/ folder.
  bool merge_adapter = false;
  // QLoRA, by bitsandbytes' names (--load_in_4bit ...): the frozen base's linear layers (all but
  // lm_head) stored in 4 bits (four_bit.h) and dequantized one layer at a time for compute.
  bool load_in_4bit = false;
  std::string bnb_4bit_quant_type = "nf4";  // or "fp4"
  bool bnb_4bit_use_double_quant = false;   // the scales in 8 bits too
  std::string bnb_4bit_compute_dtype;       // bfloat16, float16, float32; empty: the training dtype
};

}  // namespace zero::llama
