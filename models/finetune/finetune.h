// zero-finetune's trainer: supervised fine-tuning of a Hugging Face Llama-family directory on
// instruction data, driven by the Hugging Face Trainer's arguments (TrainingArguments, by their
// names) and a DeepSpeed config, writing what the Trainer writes (docs/finetune.md).
//
// Every rank calls finetune() with the same arguments; rank 0 prints and writes the files.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "models/llama/lora_options.h"

namespace zero {
class World;
}

namespace zero::finetune {

// The Trainer's flags zero-finetune takes, with transformers' defaults.
struct TrainingArguments {
  std::string deepspeed;           // the DeepSpeed config (JSON file)
  std::string model_name_or_path;  // a local Hugging Face model directory
  std::string dataset;             // a local JSON / JSONL file (in place of --dataset_name)
  std::string eval_dataset;
  std::string output_dir;
  bool bf16 = false, fp16 = false;
  double num_train_epochs = 3.0;
  int64_t max_steps = -1;  // > 0: overrides num_train_epochs
  int64_t per_device_train_batch_size = 8, per_device_eval_batch_size = 8;
  int64_t gradient_accumulation_steps = 1;
  double learning_rate = 5e-5, weight_decay = 0.0;
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_epsilon = 1e-8;
  double max_grad_norm = 1.0;
  double warmup_ratio = 0.0;
  int64_t warmup_steps = 0;  // > 0: overrides warmup_ratio
  std::string lr_scheduler_type = "linear";  // linear, cosine, constant, constant_with_warmup
  int64_t logging_steps = 500;
  std::string save_strategy = "steps";  // no, steps, epoch
  int64_t save_steps = 500;
  int64_t save_total_limit = 0;       // 0: keep every checkpoint
  std::string eval_strategy = "no";   // no, steps, epoch
  int64_t eval_steps = 0;             // 0: logging_steps
  std::string resume_from_checkpoint;  // a checkpoint-N directory, or "true": the newest in output_dir
  int64_t seed = 42;
  bool gradient_checkpointing = false;
  int64_t model_max_length = 512;  // rows are cut here (Stanford Alpaca's default)
  // Micro-batches are right-padded to their longest row rounded up to this (transformers' data
  // collators' pad_to_multiple_of; 1: the longest row). 64 by default: a handful of activation
  // sizes that the allocator reuses step after step ran 22 % faster than a new size every step.
  int64_t pad_to_multiple_of = 64;
  // TRL's PEFT flags (--use_peft, --lora_r, ...): LoRA adapters on the frozen base (docs/lora.md).
  llama::LoraOptions lora;
  // The flags given on the command line: a config value that differs from one of these is an
  // error, as the Trainer's DeepSpeed integration makes it; a flag left at its default yields to
  // the config's explicit value.
  std::set<std::string> given;
  bool progress_bar = false;
  bool stop_on_signal = false;
};

struct FinetuneResult {
  std::vector<double> step_losses;     // each optimizer step's loss (mean over its learned tokens)
  std::vector<double> step_lrs;        // the lr each step ran at
  std::vector<std::string> checkpoints;  // checkpoint-N directories written, in order
  nlohmann::json log_history = nlohmann::json::array();
  int64_t global_step = 0, max_steps = 0;
  bool interrupted = false;
};

FinetuneResult finetune(const TrainingArguments& args, World& world, std::FILE* out);

}  // namespace zero::finetune
