#include "models/finetune/finetune.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "models/common/peak_rss.h"
#include "models/common/trainable_model.h"
#include "models/finetune/instruction_data.h"
#include "models/finetune/sft_batches.h"
#include "models/finetune/trainer_config.h"
#include "models/finetune/trainer_files.h"
#include "models/common/run_report.h"
#include "models/llama/llama_trainable.h"
#include "text/tokenizer.h"
#include "zero/pipeline.h"
#include "zero/tensor_parallel.h"
#include "zero/zero.h"

namespace zero::finetune {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

at::Tensor long_tensor(const std::vector<int64_t>& values, int64_t rows, int64_t seq) {
  return torch::tensor(values, torch::kLong).view({rows, seq});
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The Trainer's weight decay groups: none on biases and norm weights.
std::vector<ParamGroup> decay_groups(torch::nn::Module& module, double weight_decay) {
  if (weight_decay == 0) return {};
  ParamGroup no_decay{{}, 0.0};
  for (const auto& item : module.named_parameters()) {
    const std::string& name = item.key();
    if (!item.value().requires_grad()) continue;  // a frozen base under LoRA
    if (name.find("norm") != std::string::npos || name.ends_with("bias")) no_decay.params.push_back(item.value());
  }
  if (no_decay.params.empty()) return {};
  return {no_decay};
}

std::string resolve_resume(const TrainingArguments& args) {
  if (args.resume_from_checkpoint.empty()) return "";
  if (args.resume_from_checkpoint == "true" || args.resume_from_checkpoint == "True") {
    const auto checkpoints = list_checkpoints(args.output_dir);
    if (checkpoints.empty()) {
      throw Error("--resume_from_checkpoint true: no checkpoint-N directory in " + args.output_dir,
                  "--resume_from_checkpoint");
    }
    return checkpoints.back().second;
  }
  if (!fs::is_directory(args.resume_from_checkpoint)) {
    throw Error("--resume_from_checkpoint " + args.resume_from_checkpoint + ": no such directory",
                "--resume_from_checkpoint");
  }
  return args.resume_from_checkpoint;
}

// One run: what the loop's helpers share.
struct Run {
  const TrainingArguments& args;
  World& whole_world;  // every rank: the files rank 0 writes
  World& world;        // the data-parallel ranks (all of them without tensor parallelism)
  models::TrainableModel& model;
  Engine& engine;
  const Config& config;
  gpt::Report& report;
  TrainerState state;
  ParallelGrid* pipeline_grid = nullptr;     // with pipeline stages: the grid, and how a step
  pipeline::StepOptions pipeline_options{};  // sends between them

  // The sum over `batches`' learned tokens of the loss times `scale`, on every rank: forward only
  // (evaluation) or with the backward (a step: `batches` are its micro-batches), through the
  // pipeline's stages or the whole model.
  double loss_sum(const std::vector<MicroBatch>& batches, double scale, bool train) {
    auto tokens = [&](const MicroBatch& b) {
      return std::pair{long_tensor(b.inputs, b.rows, b.seq), long_tensor(b.targets, b.rows, b.seq)};
    };
    if (pipeline_grid) {
      const bool last = pipeline_grid->stage() + 1 == pipeline_grid->stages();
      const pipeline::StageWork work{
          .forward = [&](int64_t m, const at::Tensor& received) {
            const auto [x, y] = tokens(batches[static_cast<size_t>(m)]);
            const at::Tensor out = model.stage_forward(x, y, received, models::TrainableModel::LossReduction::kSum);
            return last ? out * scale : out;
          },
          .activation_shape = [&](int64_t m) {
            const MicroBatch& b = batches[static_cast<size_t>(m)];
            return model.stage_activation_shape(b.rows, b.seq);
          },
          .activation_dtype = model.stage_activation_dtype(),
          .tied = model.tied_weight()};
      pipeline::StepOptions options = pipeline_options;
      options.micro_batches = static_cast<int64_t>(batches.size());
      return train ? pipeline::train_step(*pipeline_grid, engine, work, options)
                   : pipeline::evaluate(*pipeline_grid, engine, work, options);
    }
    double sum = 0;
    for (const MicroBatch& b : batches) {
      const auto [x, y] = tokens(b);
      const at::Tensor loss = engine.forward([&] { return model.loss_sum(x, y) * scale; });
      if (train) {
        engine.backward(loss);
        engine.step();
      }
      sum += loss.item<double>();
    }
    return sum;
  }

  // Collective: the mean loss over every learned token of `data`, each rank taking its share.
  double evaluate(const std::vector<Example>& data, int32_t pad_id) {
    torch::NoGradGuard no_grad;
    engine.eval();
    const int64_t rows = args.per_device_eval_batch_size, per_round = rows * world.size();
    const auto n = static_cast<int64_t>(data.size());
    double sums[2] = {0, 0};  // loss sum, tokens
    std::vector<MicroBatch> rounds;
    // Every rank runs the same number of forwards (stage 3 gathers are collective): rows past the
    // end repeat the first example with nothing learned.
    for (int64_t first = 0; first < n; first += per_round) {
      std::vector<Example> batch;
      for (int64_t j = 0; j < rows; ++j) {
        const int64_t index = first + world.rank() * rows + j;
        Example e = data[static_cast<size_t>(index < n ? index : 0)];
        if (index >= n) std::fill(e.labels.begin(), e.labels.end(), kIgnoreIndex);
        batch.push_back(std::move(e));
      }
      const SftBatches one(batch, rows, 1, 1, 0, pad_id);
      rounds.push_back(one.micro_batch(0, 0, 0));
      const std::vector<int64_t>& targets = rounds.back().targets;
      sums[1] += static_cast<double>(std::count_if(targets.begin(), targets.end(), [](int64_t t) { return t != kIgnoreIndex; }));
    }
    sums[0] = loss_sum(rounds, 1.0, /*train=*/false);
    engine.train();
    at::Tensor total = torch::tensor({sums[0], sums[1]}, torch::kDouble);
    world.communicator().all_reduce(total, ReduceOp::kSum, {.async = false});
    return total[0].item<double>() / std::max(1.0, total[1].item<double>());
  }

  // Collective: output_dir/checkpoint-N as the Trainer with DeepSpeed writes it.
  void save_checkpoint(FinetuneResult& result) {
    const int64_t n = state.global_step;
    const std::string dir = (fs::path(args.output_dir) / fmt::format("checkpoint-{}", n)).string();
    nlohmann::json client = model.client_state();
    client["global_step"] = n;
    engine.save_checkpoint(dir, fmt::format("global_step{}", n), client.dump());
    // (An adapter is small: PEFT's files are written whatever the gather setting.)
    const bool gathers =
        config.zero.stage < 3 || config.zero.stage3_gather_16bit_weights_on_model_save || args.lora.enabled;
    if (gathers) model.export_to(engine, world, dir);  // model.safetensors (or the adapter), config.json, tokenizer files
    on_rank0("trainer_state", [&] {
      write_trainer_state(state, (fs::path(dir) / "trainer_state.json").string());
      for (const std::string& removed : rotate_checkpoints(args.output_dir, args.save_total_limit, dir))
        report.line("Deleting older checkpoint [" + removed + "] due to args.save_total_limit");
    });
    result.checkpoints.push_back(dir);
    report.line(fmt::format("Saving model checkpoint to {}{}", dir,
                            gathers ? "" : " (DeepSpeed checkpoint only: stage3_gather_16bit_weights_on_model_save "
                                           "is false, so no model.safetensors)"));
  }

  // Rank 0's file work, agreed on: an error there (a full disk) is every rank's error, not a rank
  // left waiting in the next collective.
  void on_rank0(const std::string& what, const std::function<void()>& work) {
    std::string error;
    if (whole_world.rank() == 0) {
      try {
        work();
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    zero::agree(whole_world.communicator(), error, whole_world.rank(), what);
  }

  void log(nlohmann::ordered_json logs) {
    logs["epoch"] = state.epoch;
    report.line(python_dict(logs));
    logs["step"] = state.global_step;
    state.log_history.push_back(nlohmann::json::parse(logs.dump()));  // written with sorted keys, as json.dumps(sort_keys=True)
  }
};

}  // namespace

// The config's tensor-parallel size, read ahead: the batches are cut per data-parallel rank before
// the config is resolved (its schedule needs their count). 1 when the file does not parse: the
// full read reports why.
// The parallel layout the config asks for, read before the world is split (the config is resolved
// later, over the data-parallel ranks; an unreadable file's error comes then).
struct ParallelLayout {
  int tensor_parallel = 1, pipeline_stages = 1;
  std::string pipeline_key;
};
ParallelLayout parallel_layout(const std::string& path) {
  try {
    const Config c = Config::parse_file(path);
    return {c.tensor_parallel.size, c.pipeline.stages, c.pipeline.key};
  } catch (const std::exception&) {
    return {};
  }
}

FinetuneResult finetune(const TrainingArguments& given_args, World& whole_world, std::FILE* out) {
  const auto started = Clock::now();
  if (whole_world.rank() != 0) out = nullptr;
  for (const auto& [flag, value] : {std::pair{"--deepspeed", &given_args.deepspeed},
                                   {"--model_name_or_path", &given_args.model_name_or_path},
                                   {"--dataset", &given_args.dataset},
                                   {"--output_dir", &given_args.output_dir}}) {
    if (value->empty()) throw Error(std::string(flag) + " is required", flag);
  }
  if (given_args.eval_strategy != "no" && given_args.eval_dataset.empty())
    throw Error("--eval_strategy " + given_args.eval_strategy + " needs --eval_dataset", "--eval_strategy");
  std::vector<std::string> notes;
  const TrainingArguments args = reconcile_with_config(given_args, notes);
  for (const auto& [flag, value] : {std::pair{"--per_device_train_batch_size", args.per_device_train_batch_size},
                                   {"--per_device_eval_batch_size", args.per_device_eval_batch_size},
                                   {"--gradient_accumulation_steps", args.gradient_accumulation_steps},
                                   {"--logging_steps", args.logging_steps},
                                   {"--save_steps", args.save_steps}}) {
    if (value < 1) throw Error(fmt::format("{} must be at least 1, not {}", flag, value), flag);
  }
  const text::Tokenizer tokenizer = text::Tokenizer::load(args.model_name_or_path);
  llama::HfModel hf = llama::open_hf_model(args.model_name_or_path);
  if (args.model_max_length > hf.config.max_position_embeddings) {
    throw Error(fmt::format("--model_max_length {} is longer than the model's max_position_embeddings {} ({}/config.json)",
                            args.model_max_length, hf.config.max_position_embeddings, args.model_name_or_path),
                "--model_max_length");
  }
  // Tensor parallelism (docs/tensor_parallel.md): the model is split over groups of ranks and
  // `world` is from here on the data-parallel ranks, which the batches, the engine and the loss see.
  std::optional<ParallelGrid> grid;
  const ParallelLayout layout = parallel_layout(args.deepspeed);
  if (layout.tensor_parallel > 1 || layout.pipeline_stages > 1)
    grid.emplace(whole_world, layout.tensor_parallel, layout.pipeline_stages);
  World& world = grid ? grid->data_parallel() : whole_world;
  const InstructionData data = read_instruction_data(args.dataset, tokenizer, args.model_max_length);
  std::optional<InstructionData> eval_data;
  if (!args.eval_dataset.empty()) eval_data = read_instruction_data(args.eval_dataset, tokenizer, args.model_max_length);
  const int32_t pad_id = tokenizer.pad_id().value_or(tokenizer.eos_id().value_or(0));

  SftBatches batches(data.examples, args.per_device_train_batch_size, world.size(), args.gradient_accumulation_steps,
                     static_cast<uint64_t>(args.seed), pad_id, args.pad_to_multiple_of, hf.config.max_position_embeddings);
  const int64_t max_steps =
      args.max_steps > 0 ? args.max_steps
                         : static_cast<int64_t>(std::ceil(args.num_train_epochs * static_cast<double>(batches.steps_per_epoch())));
  const int64_t warmup = trainer_warmup_steps(args, max_steps);
  bool trainer_optimizer = false;
  Config config =
      trainer_config(args, whole_world.size(), hf.config.hidden_size, max_steps, warmup, notes, trainer_optimizer);
  if (config.zero.offload_optimizer.device == OffloadDevice::kNvme || config.zero.offload_param.device == OffloadDevice::kNvme)
    return_large_blocks();  // resident memory is the point (as zero-train)
  gpt::Report report(out, args.progress_bar, max_steps);
  for (const std::string& note : notes) report.line("zero-finetune: " + note);
  torch::manual_seed(static_cast<uint64_t>(args.seed));
  llama::LoraOptions lora = args.lora;
  lora.seed = static_cast<uint64_t>(args.seed);  // lora_A's draw (the Trainer seeds before get_peft_model)
  const std::unique_ptr<models::TrainableModel> model =
      llama::make_llama(hf, config, world, {}, /*partitioned=*/true, grid ? &*grid : nullptr, lora);
  hf.weights.reset();  // the files' weights are in the model now
  if (args.gradient_checkpointing) model->set_checkpoint_every(1);
  // The Trainer's own AdamW groups its parameters; an optimizer from the config gets them as one
  // list (transformers' DummyOptim), so every parameter decays.
  Engine engine(model->module(), config, world,
                trainer_optimizer ? decay_groups(model->module(), config.optimizer.weight_decay) : std::vector<ParamGroup>{},
                model->model_parallel());
  const std::vector<int64_t> load_rss = models::peak_rss_per_rank(whole_world);

  Run run{args, whole_world, world, *model, engine, config, report, {}};
  if (grid && grid->stages() > 1) {
    report.line("zero-finetune: pipeline " + model->describe_stages());
    run.pipeline_grid = &*grid;
    run.pipeline_options = pipeline::step_options(*grid, config);
  }
  run.state.max_steps = max_steps;
  run.state.logging_steps = args.logging_steps;
  run.state.eval_steps = args.eval_steps > 0 ? args.eval_steps : args.logging_steps;
  run.state.save_steps = args.save_steps;
  run.state.train_batch_size = args.per_device_train_batch_size;
  run.state.num_train_epochs = std::ceil(static_cast<double>(max_steps) / static_cast<double>(batches.steps_per_epoch()));

  report.line(fmt::format("zero-finetune: {} ({} parameters), ZeRO stage {}, {}, {} rank{}", model->describe(),
                          model->parameters(), config.zero.stage, config.bf16 ? "bf16" : config.fp16.enabled ? "fp16" : "fp32",
                          world.size(), world.size() == 1 ? "" : "s"));
  report.line(fmt::format("zero-finetune: {}: {} records ({} alpaca, {} chat), {} cut at --model_max_length {}, {} "
                          "with nothing to learn dropped",
                          args.dataset, data.records, data.alpaca, data.chat, data.truncated, args.model_max_length,
                          data.dropped));
  report.line(fmt::format("zero-finetune: model built: peak RSS so far {} KiB per rank", fmt::join(load_rss, " ")));
  report.line("***** Running training *****");
  report.line(fmt::format("  Num examples = {}", data.examples.size()));
  report.line(fmt::format("  Num Epochs = {}", run.state.num_train_epochs));
  report.line(fmt::format("  Instantaneous batch size per device = {}", args.per_device_train_batch_size));
  report.line(fmt::format("  Total train batch size (w. parallel, distributed & accumulation) = {}", batches.global_rows()));
  report.line(fmt::format("  Gradient Accumulation steps = {}", args.gradient_accumulation_steps));
  report.line(fmt::format("  Total optimization steps = {}", max_steps));
  report.line(fmt::format("  Number of trainable parameters = {}", model->parameters()));

  FinetuneResult result;
  result.max_steps = max_steps;
  if (const std::string from = resolve_resume(args); !from.empty()) {
    engine.load_checkpoint(from);
    const TrainerState saved = read_trainer_state((fs::path(from) / "trainer_state.json").string());
    run.state.global_step = saved.global_step;
    run.state.epoch = saved.epoch;
    run.state.log_history = saved.log_history;
    report.line(fmt::format("zero-finetune: resumed from {} at step {}", from, saved.global_step));
  }
  gpt::SignalScope signals(args.stop_on_signal);
  double logged_loss_sum = 0, total_loss = 0;
  int64_t last_logged = run.state.global_step, steps_run = 0;
  const auto train_start = Clock::now();
  std::optional<double> first_step_seconds;
  double later_steps_seconds = 0;
  const int64_t accumulation = args.gradient_accumulation_steps;
  while (run.state.global_step < max_steps) {
    const int64_t step = run.state.global_step;
    const auto step_start = Clock::now();
    // The step's loss is the mean over its learned tokens on every rank: each micro-step's sum
    // is scaled so that the engine's mean over micro-steps and ranks gives exactly that.
    const double scale = static_cast<double>(accumulation * world.size()) / static_cast<double>(batches.learned_tokens(step));
    const double lr = engine.get_lr();
    std::vector<MicroBatch> micro_batches;
    for (int64_t m = 0; m < accumulation; ++m) micro_batches.push_back(batches.micro_batch(step, m, world.rank()));
    const double loss_part =
        run.loss_sum(micro_batches, scale, /*train=*/true) / static_cast<double>(accumulation * world.size());
    at::Tensor shared = torch::tensor({loss_part, gpt::stop_requested() ? 1.0 : 0.0}, torch::kDouble);
    world.communicator().all_reduce(shared, ReduceOp::kSum, {.async = false});
    if (grid) gpt::stop_anywhere(shared, grid->tensor_parallel());
    if (grid && grid->stages() > 1) gpt::stop_anywhere(shared, grid->pipeline());
    const double loss = shared[0].item<double>(), seconds = seconds_since(step_start);
    if (!first_step_seconds) {
      first_step_seconds = seconds_since(started);
      report.line(fmt::format("zero-finetune: first step done {:.1f} s after start ({:.1f} s for the step)",
                              *first_step_seconds, seconds));
    }
    ++run.state.global_step;
    ++steps_run;
    run.state.epoch = static_cast<double>(run.state.global_step) / static_cast<double>(batches.steps_per_epoch());
    if (steps_run > 1) later_steps_seconds += seconds;
    result.step_losses.push_back(loss);
    result.step_lrs.push_back(lr);
    logged_loss_sum += loss;
    total_loss += loss;
    const int64_t done = run.state.global_step;
    const bool last = done == max_steps, epoch_end = done % batches.steps_per_epoch() == 0;
    if (args.logging_steps > 0 && done % args.logging_steps == 0) {
      nlohmann::ordered_json logs;
      logs["loss"] = python_round(logged_loss_sum / static_cast<double>(done - last_logged), 4);
      logs["grad_norm"] = engine.get_global_grad_norm();
      logs["learning_rate"] = engine.get_lr();  // the next step's, as the Trainer's get_last_lr()
      run.log(logs);
      logged_loss_sum = 0;
      last_logged = done;
    }
    if (eval_data && ((args.eval_strategy == "steps" && done % run.state.eval_steps == 0) ||
                      (args.eval_strategy == "epoch" && epoch_end))) {
      const auto eval_start = Clock::now();
      const double eval_loss = run.evaluate(eval_data->examples, pad_id);
      const double eval_seconds = seconds_since(eval_start);
      nlohmann::ordered_json logs;
      logs["eval_loss"] = eval_loss;
      logs["eval_runtime"] = python_round(eval_seconds, 4);
      logs["eval_samples_per_second"] = python_round(static_cast<double>(eval_data->examples.size()) / eval_seconds, 3);
      const double eval_batches = std::ceil(static_cast<double>(eval_data->examples.size()) /
                                            static_cast<double>(args.per_device_eval_batch_size * world.size()));
      logs["eval_steps_per_second"] = python_round(eval_batches / eval_seconds, 3);
      run.log(logs);
    }
    report.progress(done, seconds);
    const bool stop = shared[1].item<double>() > 0;
    if ((args.save_strategy == "steps" && (done % args.save_steps == 0 || last)) ||
        (args.save_strategy == "epoch" && (epoch_end || last)) || (stop && args.save_strategy != "no")) {
      run.save_checkpoint(result);
    }
    if (stop) {
      result.interrupted = true;
      report.line(fmt::format("zero-finetune: stopped by a signal after step {}", done));
      break;
    }
  }
  report.finish();
  const double runtime = seconds_since(train_start);
  if (!result.interrupted) {
    nlohmann::ordered_json summary;
    summary["train_runtime"] = python_round(runtime, 4);
    summary["train_samples_per_second"] =
        python_round(static_cast<double>(steps_run * batches.global_rows()) / runtime, 3);
    summary["train_steps_per_second"] = python_round(static_cast<double>(steps_run) / runtime, 3);
    summary["total_flos"] = 0.0;
    summary["train_loss"] = steps_run > 0 ? total_loss / static_cast<double>(steps_run) : 0.0;
    run.log(summary);
    // The final model, as trainer.save_model() and save_state() leave it.
    const bool gathers =
        config.zero.stage < 3 || config.zero.stage3_gather_16bit_weights_on_model_save || args.lora.enabled;
    if (gathers) model->export_final(engine, world, args.output_dir);
    run.on_rank0("trainer_state", [&] {
      fs::create_directories(args.output_dir);
      write_trainer_state(run.state, (fs::path(args.output_dir) / "trainer_state.json").string());
    });
    report.line(gathers ? "zero-finetune: wrote the " + std::string(args.lora.enabled ? "adapter" : "model") + " to " + args.output_dir
                        : "zero-finetune: stage3_gather_16bit_weights_on_model_save is false: the model is in the "
                          "last checkpoint's DeepSpeed files only (zero-ckpt consolidate --format hf makes a "
                          "directory of them)");
  }
  // Throughput from the second step on (the first also records stage 3's order and faults memory in).
  const std::vector<int64_t> rss = models::peak_rss_per_rank(whole_world);
  int64_t tokens = 0;
  for (int64_t s = run.state.global_step - steps_run + 1; s < run.state.global_step; ++s) {
    for (int64_t index : batches.global_batch(s)) tokens += static_cast<int64_t>(data.examples[static_cast<size_t>(index)].ids.size());
  }
  report.line(fmt::format("zero-finetune: {} steps in {:.1f} s; after the first: {:.1f} tokens/s (unpadded rows); "
                          "peak RSS {} KiB per rank",
                          steps_run, runtime, steps_run > 1 ? static_cast<double>(tokens) / later_steps_seconds : 0.0,
                          fmt::join(rss, " ")));
  result.global_step = run.state.global_step;
  result.log_history = run.state.log_history;
  return result;
}

}  // namespace zero::finetune
