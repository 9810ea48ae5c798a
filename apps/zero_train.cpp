// zero-train — trains llm.c's GPT-2, or a Hugging Face Llama / Mistral / Qwen2 directory, with
// ZeRO from a DeepSpeed config (README, "zero-train").
//
//   zero-run -n 2 build/apps/zero-train                       # built-in corpus and config
//   zero-run -n 2 build/apps/zero-train --config ds.json --train-data 'data/train_*.bin' --init gpt2.bin
//   zero-run -n 2 build/apps/zero-train --model SmolLM2-135M --config ds.json --train-data 'data/*.bin' \
//       --seq-len 512 --export out/
#include <fmt/core.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "apps/lora_flags.h"
#include "checkpoint/hf_directory_writer.h"
#include "models/common/trainer.h"
#include "zero/zero.h"

int main(int argc, char** argv) {
  CLI::App app{"zero-train: GPT-2 (llm.c layout) trained with ZeRO from a DeepSpeed config"};
  zero::gpt::TrainerOptions o;
  auto& s = o.shape;
  app.add_option("--config", o.config_path, "DeepSpeed JSON config (default: built-in ZeRO-2, AdamW)")
      ->check(CLI::ExistingFile);
  app.add_option("--init", o.init, "start from an llm.c checkpoint (version 3)")->check(CLI::ExistingFile);
  app.add_option("--model", o.model_dir,
                 "train a Hugging Face model directory (config.json + safetensors: Llama, Mistral, Qwen2)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--device", o.device,
                 "where the model trains: cpu, cuda (each rank on the GPU of its local rank) or cuda:N")
      ->capture_default_str();
  std::string max_shard = "0";
  app.add_option("--max-shard-size", max_shard,
                 "with --model --export: shards of at most this size (\"5GB\", \"500MB\", \"2GiB\", bytes; 0: one file)")
      ->capture_default_str();
  app.add_option("--layers", s.layers, "L, for a fresh model")->capture_default_str();
  app.add_option("--heads", s.heads, "NH, for a fresh model")->capture_default_str();
  app.add_option("--channels", s.channels, "C, for a fresh model")->capture_default_str();
  app.add_option("--max-seq", s.max_seq, "maxT, for a fresh model")->capture_default_str();
  app.add_option("--vocab", s.vocab, "V, for a fresh model (256 for bytes)")->capture_default_str();
  app.add_option("--train-data", o.train_data, "llm.c token shards (a glob)");
  app.add_option("--text", o.text, "train on the bytes of this file (V = 256)")->check(CLI::ExistingFile);
  app.add_option("--val-data", o.val_data, "validation shards (a glob), or a text file with --text");
  app.add_option("--seq-len", o.seq, "T of each row (default: maxT)");
  app.add_option("--steps", o.steps, "optimizer steps")->capture_default_str();
  app.add_option("--seed", o.seed, "initialisation seed")->capture_default_str();
  app.add_option("--shuffle", o.shuffle, "shuffle the batches each epoch with this seed");
  app.add_option("--print-every", o.print_every, "print a step line every K steps")->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "validation loss every K steps (0: never)")->capture_default_str();
  app.add_option("--eval-batches", o.eval_batches, "global batches per validation")->capture_default_str();
  app.add_option("--sample-every", o.sample_every, "print a sample every K steps (0: never)")->capture_default_str();
  app.add_option("--sample-tokens", o.sample.tokens, "tokens per sample")->capture_default_str();
  app.add_option("--top-k", o.sample.top_k, "sample among the k most likely tokens (0: greedy)")->capture_default_str();
  app.add_option("--prompt", o.prompt, "sample prompt, as bytes (default: the data's first tokens)");
  app.add_option("--tokenizer", o.tokenizer, "llm.c tokenizer file, to print GPT-2 samples as text")
      ->check(CLI::ExistingFile);
  app.add_option("--export", o.export_path,
                 "write the trained weights: an llm.c checkpoint, or with --model a Hugging Face directory");
  app.add_option("--save-dir", o.save_dir, "checkpoint directory (saves at the end and on Ctrl-C)");
  app.add_option("--save-every", o.save_every, "also save every K steps")->capture_default_str();
  app.add_flag("--resume", o.resume, "continue from the latest checkpoint in --save-dir, if there is one");
  bool checkpointing = false;
  app.add_flag("--activation-checkpointing", checkpointing,
               "keep only each block's input and recompute the block in backward (less memory, ~1/3 more compute)");
  int64_t checkpoint_every = 1;
  app.add_option("--checkpoint-every", checkpoint_every, "with --activation-checkpointing: every K-th block only")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  // Values for the config's "auto" keys only (Hugging Face TrainingArguments' defaults where it
  // has one; the batch keys have none: an "auto" batch key needs its flag).
  zero::AutoContext& a = o.auto_values;
  int64_t micro = 0, accumulation = 0, warmup = 0;
  double lr = 5e-5, weight_decay = 0, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8, max_grad_norm = 1.0;
  const char* kAuto = "for \"auto\" in the config";
  app.add_option("--micro-batch", micro, std::string("per-rank micro batch, ") + kAuto)->check(CLI::PositiveNumber);
  app.add_option("--grad-accum", accumulation, std::string("gradient accumulation steps, ") + kAuto)
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, std::string("learning rate, ") + kAuto)->capture_default_str();
  app.add_option("--weight-decay", weight_decay, std::string("weight decay, ") + kAuto)->capture_default_str();
  app.add_option("--adam-beta1", beta1, std::string("Adam beta1, ") + kAuto)->capture_default_str();
  app.add_option("--adam-beta2", beta2, std::string("Adam beta2, ") + kAuto)->capture_default_str();
  app.add_option("--adam-epsilon", epsilon, std::string("Adam epsilon, ") + kAuto)->capture_default_str();
  app.add_option("--max-grad-norm", max_grad_norm, std::string("gradient clipping, ") + kAuto)->capture_default_str();
  app.add_option("--warmup-steps", warmup, std::string("scheduler warmup steps, ") + kAuto)->capture_default_str();
  app.add_option("--metrics-port", o.metrics_port,
                 "serve Prometheus metrics at http://127.0.0.1:PORT/metrics (rank r on PORT + local rank r); "
                 "the config's \"prometheus\" block sets the host")
      ->check(CLI::Range(0, 65535));
  bool no_bar = false;
  app.add_flag("--no-progress", no_bar, "no progress bar, even on a terminal");
  zero::apps::LoraFlags lora_flags;
  zero::apps::add_lora_flags(app, o.lora, lora_flags);
  CLI11_PARSE(app, argc, argv);
  try {
    o.hf_max_shard_bytes = zero::checkpoint::parse_shard_size(max_shard);
  } catch (const zero::Error& e) {
    fmt::print(stderr, "zero-train: --max-shard-size: {}\n", e.what());
    return 1;
  }
  try {
    zero::apps::finish_lora_flags(app, o.lora, lora_flags);
    if (o.lora.enabled && o.model_dir.empty()) throw zero::Error("--use_peft needs --model (a Hugging Face model directory)", "--use_peft");
  } catch (const zero::Error& e) {
    fmt::print(stderr, "zero-train: {}\n", e.what());
    return 1;
  }
  if (micro) a.micro_batch_size = micro;
  if (accumulation) a.gradient_accumulation_steps = accumulation;
  a.learning_rate = lr;
  a.weight_decay = weight_decay;
  a.adam_beta1 = beta1;
  a.adam_beta2 = beta2;
  a.adam_epsilon = epsilon;
  a.max_grad_norm = max_grad_norm;
  a.warmup_steps = warmup;
  if (o.config_path.empty() && o.text.empty() && o.train_data.empty() && o.init.empty()) {
    // The built-in default (scripts/demo): show validation and samples along the way.
    if (app.count("--eval-every") == 0) o.eval_every = 50;
    if (app.count("--sample-every") == 0) o.sample_every = 100;
    if (app.count("--print-every") == 0) o.print_every = 10;
  }
  o.checkpoint_every = checkpointing ? checkpoint_every : 0;
  // One thread per rank on the CPU (ranks share the cores). With the model on a GPU the host's
  // cores are the CPU Adam's under offload_optimizer: LibTorch's default (one per core).
  if (o.device.empty() || o.device == "cpu") torch::set_num_threads(1);
  zero::keep_freed_memory();  // include/zero/allocator.h: the same tensors every step
  const char* launcher_tty = std::getenv("ZERO_STDOUT_IS_TTY");  // set by zero-run
  o.progress_bar = !no_bar && (launcher_tty ? std::string(launcher_tty) == "1" : isatty(STDOUT_FILENO) != 0);
  o.stop_on_signal = true;

  try {
    zero::World world = zero::World::from_environment();
    zero::gpt::train_model(o, world, stdout);
    return 0;  // a run stopped by Ctrl-C has saved (with --save-dir) and ends cleanly too
  } catch (const zero::Error& e) {
    fmt::print(stderr, "zero-train: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // e.g. a LibTorch kernel missing for a dtype: one line, no abort
    fmt::print(stderr, "zero-train: {}\n", zero::first_line(e));
    return 1;
  }
}
