// The trainer behind `zero-train`, as a library so tests drive the very loop users run: the GPT
// of llm.c's files, or a Llama-family model from a Hugging Face directory (`model_dir`); the loop
// sees either through models/common/trainable_model.h.
//
// Every rank calls train_model with the same options; rank 0 prints. Batch sizes, optimizer,
// schedule, precision and ZeRO stage come from the DeepSpeed config ("auto" resolved from the
// world size, the model's width and the step count). The global batch of a step is the same at
// any world size, so every stage and rank count follows the same loss trajectory.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "models/gpt/llmc_files.h"
#include "models/llama/lora_options.h"
#include "zero/comm_stats.h"
#include "zero/engine.h"
#include "zero/config.h"
#include "models/gpt/sampler.h"

namespace zero {
class World;
}

namespace zero::gpt {

struct TrainerOptions {
  std::string config_path;  // a DeepSpeed JSON file; empty: config_text
  std::string config_text;  // JSON text; empty too: the built-in ZeRO-2 config (builtin_config())
  std::string init;         // an llm.c checkpoint to start from; empty: a fresh model of `shape`
  // A Hugging Face model directory (Llama, Mistral, Qwen2) to train instead of the GPT; its
  // export (export_path) is a Hugging Face directory, in shards of at most hf_max_shard_bytes
  // (0: one file).
  std::string model_dir;
  uint64_t hf_max_shard_bytes = 0;
  // With model_dir: LoRA adapters on the frozen base (docs/lora.md); the export is the adapter.
  llama::LoraOptions lora;
  // Where the model trains: "cpu" (default), "cuda" (each rank on the GPU of its local rank) or
  // "cuda:N".
  std::string device;
  GptShape shape{.max_seq = 128, .vocab = 256, .layers = 4, .heads = 4, .channels = 128, .padded_vocab = 0};
  // Training data: llm.c shards (a glob), or the bytes of a text file; neither: the built-in corpus.
  std::string train_data, text;
  // Validation data: shards (a glob), or a text file when training on text; with the built-in
  // corpus, a held-out text from the same grammar.
  std::string val_data;
  std::string tokenizer;  // llm.c tokenizer file for GPT-2 samples; empty: bytes
  int64_t seq = 0;        // T of a row; 0: the model's maxT
  int64_t steps = 300;
  int64_t seed = 1234;   // model initialisation
  int64_t shuffle = -1;  // >= 0: a seeded permutation of the batches each epoch
  int64_t print_every = 1;
  int64_t eval_every = 0;  // 0: no validation
  int64_t eval_batches = 4;
  int64_t sample_every = 0;  // 0: no samples
  SampleOptions sample;
  std::string prompt;       // bytes; empty: the first tokens of the validation (or training) data
  std::string export_path;  // written at the end: an llm.c checkpoint, or a Hugging Face directory
  // Engine checkpoints (Engine::save_checkpoint): every save_every steps (0: never), at the end,
  // and when stopped by a signal. resume: continue from save_dir's latest checkpoint, if any.
  std::string save_dir;
  int64_t save_every = 0;
  bool resume = false;
  // Activation checkpointing: blocks 0, k, 2k, ... keep only their inputs and run again in
  // backward (0: off).
  int64_t checkpoint_every = 0;
  // The trainer's values for the config's "auto" keys, as a Hugging Face trainer would give them
  // (world size, hidden size and total steps are filled in from the run itself).
  AutoContext auto_values;
  // >= 0: serve Prometheus metrics on this port (+ local rank), as the config's "prometheus"
  // block would (docs/observability.md); -1: as the config says.
  int metrics_port = -1;
  bool progress_bar = false;    // a live bar under the step lines (the CLI sets it for a terminal)
  bool stop_on_signal = false;  // SIGINT/SIGTERM end the run after the current step
};

struct StepLog {
  int64_t step = 0;  // 1-based
  double loss = 0, lr = 0, grad_norm = 0, loss_scale = 1, tokens_per_second = 0, milliseconds = 0;
};

struct TrainerResult {
  std::vector<StepLog> steps;
  std::vector<std::pair<int64_t, double>> val_losses;  // (step, loss)
  std::vector<std::string> samples;
  bool interrupted = false;
  std::vector<std::string> saved;  // checkpoint tags written
  // The engine's parameter all-gathers over the run (stage 3: the units' gathers).
  int64_t all_gather_calls = 0;
  double all_gather_seconds = 0;
  // Tensor parallelism: the collectives of the model's layers over its group, over the run
  // (training steps and any evaluation); all-gathers and reduce-scatters with sequence parallelism.
  OpStats tensor_parallel_all_reduce, tensor_parallel_all_gather, tensor_parallel_reduce_scatter;
  // Expert parallelism: this rank's exchange of rows with its expert-parallel group (all-to-all
  // with variable counts; bus bytes: those sent to other ranks) over the run.
  OpStats expert_parallel_all_to_all;
  // Pipeline parallelism: the bytes this rank sent to and received from its neighbouring stages.
  int64_t pipeline_sent = 0, pipeline_received = 0;
  // Mixtures of experts: per MoE layer, the tokens each expert got over the run, all
  // data-parallel ranks together.
  std::vector<std::vector<int64_t>> tokens_per_expert;
  MemoryReport memory;  // this rank's engine at the end (model states by category)
};

// The DeepSpeed config used when none is given.
const std::string& builtin_config();

// Trains; rank 0 writes its report to `out` (nullptr: silent). Errors are zero::Error.
TrainerResult train_model(const TrainerOptions& options, World& world, std::FILE* out);

}  // namespace zero::gpt
