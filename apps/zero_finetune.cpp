// zero-finetune — supervised fine-tuning of a Hugging Face Llama / Mistral / Qwen2 directory on
// instruction data, with the Hugging Face Trainer's flags and a DeepSpeed config (README, "Quick
// start"; docs/finetune.md):
//
//   zero-run -n 4 build/apps/zero-finetune --deepspeed ds_zero3.json --model_name_or_path ./Llama-3-8B \
//       --dataset alpaca_data_cleaned.json --output_dir ./llama3-8b-sft --bf16 true --num_train_epochs 3 \
//       --per_device_train_batch_size 1 --learning_rate 2e-5 --warmup_ratio 0.03 --lr_scheduler_type cosine \
//       --logging_steps 10 --save_strategy steps --save_steps 500
#include <fmt/core.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "apps/lora_flags.h"
#include "models/finetune/finetune.h"
#include "zero/zero.h"


int main(int argc, char** argv) {
  CLI::App app{"zero-finetune: supervised fine-tuning with the Hugging Face Trainer's flags and a DeepSpeed config"};
  zero::finetune::TrainingArguments a;
  std::map<std::string, std::string> bools;  // flag -> text, read after parsing
  auto value = [&](const std::string& name, auto& target, const std::string& help) {
    return app.add_option("--" + name, target, help)->capture_default_str();
  };
  auto flag = [&](const std::string& name, const std::string& help) {
    app.add_option("--" + name, bools[name], help + " (true/false; bare: true)")->expected(0, 1);
  };
  value("deepspeed", a.deepspeed, "DeepSpeed config (JSON)")->check(CLI::ExistingFile);
  value("model_name_or_path", a.model_name_or_path, "a local Hugging Face model directory (Llama, Mistral, Qwen2)")
      ->check(CLI::ExistingDirectory);
  value("dataset", a.dataset, "instruction data: a local JSON or JSONL file (alpaca layout or chat \"messages\")")
      ->check(CLI::ExistingFile);
  value("eval_dataset", a.eval_dataset, "evaluation data, the same layouts")->check(CLI::ExistingFile);
  value("output_dir", a.output_dir, "where checkpoint-N directories and the final model go");
  flag("bf16", "bf16 mixed precision (fills the config's \"auto\")");
  flag("fp16", "fp16 mixed precision (fills the config's \"auto\")");
  value("num_train_epochs", a.num_train_epochs, "epochs (may be fractional)");
  value("max_steps", a.max_steps, "optimizer steps; > 0 overrides --num_train_epochs");
  value("per_device_train_batch_size", a.per_device_train_batch_size, "rows per rank per micro-step")->check(CLI::PositiveNumber);
  value("per_device_eval_batch_size", a.per_device_eval_batch_size, "rows per rank per evaluation batch")->check(CLI::PositiveNumber);
  value("gradient_accumulation_steps", a.gradient_accumulation_steps, "micro-steps per optimizer step")->check(CLI::PositiveNumber);
  value("learning_rate", a.learning_rate, "peak learning rate");
  value("weight_decay", a.weight_decay, "AdamW weight decay (not on biases and norms)");
  value("adam_beta1", a.adam_beta1, "AdamW beta1");
  value("adam_beta2", a.adam_beta2, "AdamW beta2");
  value("adam_epsilon", a.adam_epsilon, "AdamW epsilon");
  value("max_grad_norm", a.max_grad_norm, "gradient clipping");
  value("warmup_ratio", a.warmup_ratio, "warmup as a share of the steps");
  value("warmup_steps", a.warmup_steps, "warmup steps; > 0 overrides --warmup_ratio");
  value("lr_scheduler_type", a.lr_scheduler_type, "linear, cosine, constant, constant_with_warmup")
      ->check(CLI::IsMember({"linear", "cosine", "constant", "constant_with_warmup"}));
  value("logging_steps", a.logging_steps, "a log line every K steps")->check(CLI::PositiveNumber);
  value("save_strategy", a.save_strategy, "no, steps, epoch")->check(CLI::IsMember({"no", "steps", "epoch"}));
  value("save_steps", a.save_steps, "with --save_strategy steps: a checkpoint every K steps")->check(CLI::PositiveNumber);
  value("save_total_limit", a.save_total_limit, "keep at most this many checkpoints (0: all)");
  value("eval_strategy", a.eval_strategy, "no, steps, epoch")->check(CLI::IsMember({"no", "steps", "epoch"}));
  value("eval_steps", a.eval_steps, "with --eval_strategy steps: evaluate every K steps (0: --logging_steps)");
  value("resume_from_checkpoint", a.resume_from_checkpoint, "a checkpoint-N directory, or true: the newest in --output_dir");
  value("seed", a.seed, "data order (each epoch) and initialisation");
  flag("gradient_checkpointing", "recompute each decoder layer in backward (less memory)");
  value("model_max_length", a.model_max_length, "rows are cut at this many tokens")->check(CLI::PositiveNumber);
  value("pad_to_multiple_of", a.pad_to_multiple_of, "micro-batches are padded to their longest row rounded up to this")
      ->check(CLI::PositiveNumber);
  flag("disable_tqdm", "no progress bar, even on a terminal");
  zero::apps::LoraFlags lora_flags;
  zero::apps::add_lora_flags(app, a.lora, lora_flags);
  CLI11_PARSE(app, argc, argv);
  bool no_bar = false;
  try {
    for (const auto& [name, text] : bools) {
      if (app.count("--" + name) == 0) continue;
      const bool on = zero::apps::parse_bool_flag(name, text);
      if (name == "bf16") a.bf16 = on;
      if (name == "fp16") a.fp16 = on;
      if (name == "gradient_checkpointing") a.gradient_checkpointing = on;
      if (name == "disable_tqdm") no_bar = on;
    }
    zero::apps::finish_lora_flags(app, a.lora, lora_flags);
  } catch (const zero::Error& e) {
    fmt::print(stderr, "zero-finetune: {}\n", e.what());
    return 1;
  }
  for (const CLI::Option* option : app.get_options()) {
    if (option->count() > 0) a.given.insert(option->get_name().substr(2));  // "--bf16" -> "bf16"
  }
  if (a.eval_strategy == "no" && !a.eval_dataset.empty() && a.given.count("eval_steps")) a.eval_strategy = "steps";
  torch::set_num_threads(1);
  zero::keep_freed_memory();  // include/zero/allocator.h
  const char* launcher_tty = std::getenv("ZERO_STDOUT_IS_TTY");  // set by zero-run
  a.progress_bar = !no_bar && (launcher_tty ? std::string(launcher_tty) == "1" : isatty(STDOUT_FILENO) != 0);
  a.stop_on_signal = true;
  try {
    zero::World world = zero::World::from_environment();
    zero::finetune::finetune(a, world, stdout);
    return 0;
  } catch (const zero::Error& e) {
    fmt::print(stderr, "zero-finetune: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "zero-finetune: {}\n", zero::first_line(e));
    return 1;
  }
}
