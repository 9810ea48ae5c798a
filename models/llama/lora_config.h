// A PEFT LoRA adapter's description, torch-free (lora.h attaches adapters to a model; lora_merge.h
// merges them into a Hugging Face directory): from TRL's flags or from adapter_config.json, and
// PEFT's tensor names (docs/lora.md).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/llama/lora_options.h"

namespace zero::llama {

// The prefix of every tensor name in a PEFT adapter file: PeftModel → LoraModel → the model.
inline constexpr const char* kPeftPrefix = "base_model.model.";

// What an adapter is, resolved: from the flags, or from an adapter directory's adapter_config.json.
struct LoraSpec {
  int64_t r = 0;
  double alpha = 0, dropout = 0;
  nlohmann::json target_modules;  // a list of names, "all-linear", or another string (a regular expression)
  bool use_rslora = false;
  std::vector<std::string> modules_to_save;
  double scaling() const;
};

// The spec from the flags (PEFT's default targets filled in); errors name the flag.
LoraSpec lora_spec_from_options(const LoraOptions& options);
// The spec from DIR/adapter_config.json; an error names the file and the key (a PEFT method other
// than LoRA, DoRA, per-layer ranks, biases, ... are refused, not ignored).
LoraSpec read_adapter_config(const std::string& dir);

// PEFT's name of an engine parameter that is an adapter or a module to save
// ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").
std::string peft_name(const std::string& engine_name);

// PEFT's adapter_config.json for `spec` (the keys these adapters use, the others at PEFT's
// defaults); `base_dir` is base_model_name_or_path.
nlohmann::ordered_json adapter_config_json(const LoraSpec& spec, const std::string& base_dir);

}  // namespace zero::llama
