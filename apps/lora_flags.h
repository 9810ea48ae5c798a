// TRL's PEFT flags (trl.ModelConfig), shared by zero-finetune and zero-train --model: the names and
// defaults a TRL/PEFT user already writes (docs/lora.md).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "models/llama/lora_options.h"
#include "zero/error.h"

namespace zero::apps {

// transformers' HfArgumentParser reads a bool flag bare or with a value: --bf16, --bf16 true, --bf16 False.
inline bool parse_bool_flag(const std::string& flag, const std::string& text) {
  if (text.empty() || text == "true" || text == "True" || text == "1" || text == "yes") return true;
  if (text == "false" || text == "False" || text == "0" || text == "no") return false;
  throw Error("--" + flag + " " + text + ": expected true or false", "--" + flag);
}

struct LoraFlags {
  // bool flags' texts, read after parsing
  std::string use_peft, use_rslora, load_in_4bit, double_quant, nested_quant, merge_adapter;
};

inline void add_lora_flags(CLI::App& app, llama::LoraOptions& o, LoraFlags& flags) {
  app.add_option("--use_peft", flags.use_peft, "train LoRA adapters on the frozen base (true/false; bare: true)")
      ->expected(0, 1);
  app.add_option("--lora_r", o.r, "LoRA rank")->capture_default_str();
  app.add_option("--lora_alpha", o.alpha, "LoRA alpha (scaling alpha/r)")->capture_default_str();
  app.add_option("--lora_dropout", o.dropout, "dropout on the adapters' input")->capture_default_str();
  app.add_option("--lora_target_modules", o.target_modules,
                 "module names (q_proj v_proj ...) or all-linear (default: q_proj v_proj)");
  app.add_option("--use_rslora", flags.use_rslora, "rank-stabilised LoRA: scaling alpha/sqrt(r) (true/false; bare: true)")
      ->expected(0, 1);
  app.add_option("--lora_modules_to_save", o.modules_to_save, "modules trained whole beside the adapters (lm_head ...)");
  app.add_option("--adapter_name_or_path", o.adapter_dir, "continue training this PEFT adapter directory")
      ->check(CLI::ExistingDirectory);
  app.add_option("--merge_adapter", flags.merge_adapter,
                 "the final model: the base with the adapter merged (the adapter in its adapter/ folder) "
                 "(true/false; bare: true)")
      ->expected(0, 1);
  // QLoRA, by bitsandbytes' names (and TRL's --use_bnb_nested_quant).
  app.add_option("--load_in_4bit", flags.load_in_4bit, "QLoRA: the frozen base in 4 bits (true/false; bare: true)")
      ->expected(0, 1);
  app.add_option("--bnb_4bit_quant_type", o.bnb_4bit_quant_type, "nf4 or fp4")
      ->check(CLI::IsMember({"nf4", "fp4"}))
      ->capture_default_str();
  app.add_option("--bnb_4bit_use_double_quant", flags.double_quant,
                 "quantize the 4-bit scales too, in 8 bits (true/false; bare: true)")
      ->expected(0, 1);
  app.add_option("--use_bnb_nested_quant", flags.nested_quant, "TRL's name for --bnb_4bit_use_double_quant")->expected(0, 1);
  app.add_option("--bnb_4bit_compute_dtype", o.bnb_4bit_compute_dtype,
                 "bfloat16, float16 or float32: must be the run's precision (the default)");
}

// After parsing: the bools, and the flags that mean nothing without --use_peft.
inline void finish_lora_flags(const CLI::App& app, llama::LoraOptions& o, const LoraFlags& flags) {
  if (app.count("--use_peft")) o.enabled = parse_bool_flag("use_peft", flags.use_peft);
  if (app.count("--use_rslora")) o.use_rslora = parse_bool_flag("use_rslora", flags.use_rslora);
  if (app.count("--load_in_4bit")) o.load_in_4bit = parse_bool_flag("load_in_4bit", flags.load_in_4bit);
  if (app.count("--merge_adapter")) o.merge_adapter = parse_bool_flag("merge_adapter", flags.merge_adapter);
  if (app.count("--bnb_4bit_use_double_quant"))
    o.bnb_4bit_use_double_quant = parse_bool_flag("bnb_4bit_use_double_quant", flags.double_quant);
  if (app.count("--use_bnb_nested_quant"))
    o.bnb_4bit_use_double_quant = parse_bool_flag("use_bnb_nested_quant", flags.nested_quant);
  if (o.load_in_4bit && !o.enabled) {
    throw Error("--load_in_4bit without --use_peft: a 4-bit base cannot be trained itself, only adapters on it",
                "--load_in_4bit");
  }
  if (o.enabled) return;
  for (const char* flag : {"--lora_r", "--lora_alpha", "--lora_dropout", "--lora_target_modules", "--use_rslora",
                           "--lora_modules_to_save", "--adapter_name_or_path", "--bnb_4bit_quant_type",
                           "--bnb_4bit_use_double_quant", "--use_bnb_nested_quant", "--bnb_4bit_compute_dtype",
                           "--merge_adapter"}) {
    if (app.count(flag)) throw Error(std::string(flag) + " without --use_peft: nothing would use it", flag);
  }
}

}  // namespace zero::apps
