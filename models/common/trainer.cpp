#include "models/common/trainer.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <functional>
#include <optional>

#include "models/common/peak_rss.h"
#include "models/common/trainer_adamw.h"
#include "models/common/trainable_model.h"
#include "models/gpt/builtin_corpus.h"
#include "models/gpt/gpt_trainable.h"
#include "models/llama/llama_trainable.h"
#include "models/common/run_report.h"
#include "models/gpt/token_data.h"
#include "models/gpt/tokenizer.h"
#include "zero/pipeline.h"
#include "zero/tensor_parallel.h"
#include "zero/zero.h"

namespace zero::gpt {
namespace {

constexpr int64_t kBuiltinTrainBytes = 400'000, kBuiltinValBytes = 40'000;

struct Data {
  TokenData train;
  std::optional<TokenData> val;
  // What validation and the default sample prompt read: the training data when there is none.
  const TokenData& validation() const { return val ? *val : train; }
};

Data load_data(const TrainerOptions& o, int vocab) {
  if (!o.text.empty() && !o.train_data.empty()) throw Error("give --text or --train-data, not both", "--text");
  const bool bytes = o.train_data.empty();
  if (bytes && vocab != 256) {
    throw Error("--text and the built-in corpus train bytes: the model needs V = 256, not " + std::to_string(vocab),
                "--vocab");
  }
  auto from_string = [](const std::string& s, const std::string& origin) {
    return TokenData({std::vector<uint16_t>(s.begin(), s.end())}, origin);
  };
  if (o.text.empty() && o.train_data.empty()) {
    if (!o.val_data.empty())
      throw Error("--val-data needs --text or --train-data (the built-in corpus brings its own)", "--val-data");
    return {from_string(builtin_corpus(1, kBuiltinTrainBytes), "<built-in corpus>"),
            from_string(builtin_corpus(2, kBuiltinValBytes), "<built-in validation corpus>")};
  }
  TokenData train = bytes ? TokenData::from_text(o.text) : TokenData::from_shards(o.train_data, vocab);
  if (o.val_data.empty()) return {std::move(train), std::nullopt};
  return {std::move(train), bytes ? TokenData::from_text(o.val_data) : TokenData::from_shards(o.val_data, vocab)};
}

Config load_config(const TrainerOptions& o, const World& world, int64_t hidden_size) {
  AutoContext context = o.auto_values;
  context.world_size = world.size();
  context.hidden_size = hidden_size;
  context.max_steps = o.steps;
  Config config = o.config_path.empty()
                      ? Config::parse(o.config_text.empty() ? builtin_config() : o.config_text,
                                      o.config_text.empty() ? "<built-in config>" : "<config text>")
                      : Config::parse_file(o.config_path);
  config.resolve(context);
  // No optimizer block: AdamW from the trainer's values, as a Hugging Face trainer builds its own.
  if (config.optimizer.type == OptimizerType::kNone) {
    config.optimizer = models::trainer_adamw(context);
    const OptimizerConfig& a = config.optimizer;
    if (world.rank() == 0) {
      fmt::print("zero-train: the config has no optimizer block: AdamW(lr {}, weight decay {}, betas ({}, {}), eps {}) "
                 "from the trainer's values\n",
                 a.lr, a.weight_decay, a.beta1, a.beta2, a.eps);
    }
  }
  if (config.scheduler.type == SchedulerType::kNone && !o.config_path.empty() && world.rank() == 0) {
    fmt::print("zero-train: the config has no scheduler block: the learning rate stays constant (a Hugging Face "
               "trainer would decay it linearly)\n");
  }
  return config;
}

// A batch on the device the model trains on (--device).
at::Tensor to_tensor(const std::vector<int32_t>& values, int64_t rows, int64_t seq, at::Device device) {
  return torch::tensor(values, torch::kInt).to(device, torch::kLong).view({rows, seq});
}

struct Run {
  const TrainerOptions& options;
  World& world;
  models::TrainableModel& model;
  Engine& engine;
  Data& data;
  int64_t seq, global_rows;
  at::Device device;
  ParallelGrid* pipeline_grid = nullptr;     // with pipeline stages: the grid, and how a step
  pipeline::StepOptions pipeline_options{};  // sends between them

  using Tokens = std::pair<at::Tensor, at::Tensor>;  // a micro-batch's inputs and targets on this rank

  // This stage's part of running `micro_batch(0..)` through the pipeline (zero/pipeline.h).
  pipeline::StageWork stage_work(const std::function<Tokens(int64_t)>& micro_batch) {
    return {.forward = [&, micro_batch](int64_t m, const at::Tensor& received) {
              const auto [x, y] = micro_batch(m);
              return model.stage_forward(x, y, received, models::TrainableModel::LossReduction::kMean);
            },
            .activation_shape = [&](int64_t) { return model.stage_activation_shape(global_rows / world.size(), seq); },
            .activation_dtype = model.stage_activation_dtype(),
            .tied = model.tied_weight()};
  }

  double evaluate() {
    torch::NoGradGuard no_grad;
    engine.eval();
    const TokenData& val = data.validation();
    const int64_t batches = std::min(options.eval_batches, val.batches_per_epoch(global_rows, seq));
    auto micro_batch = [&](int64_t i) {
      Batch mine = val.rank_rows(val.batch(i, global_rows, seq), world.rank(), world.size());
      return Tokens{to_tensor(mine.inputs, mine.rows, seq, device), to_tensor(mine.targets, mine.rows, seq, device)};
    };
    double sum = 0;
    if (pipeline_grid) {
      pipeline::StepOptions evaluation = pipeline_options;
      evaluation.micro_batches = batches;
      sum = pipeline::evaluate(*pipeline_grid, engine, stage_work(micro_batch), evaluation);
    } else {
      for (int64_t i = 0; i < batches; ++i) {
        const auto [x, y] = micro_batch(i);
        sum += engine.forward([&] { return model.loss(x, y); }).item<double>();
      }
    }
    engine.train();
    at::Tensor mean = torch::full({1}, sum / static_cast<double>(batches), torch::kDouble);
    world.communicator().all_reduce(mean, ReduceOp::kAvg, {.async = false});
    return mean.item<double>();
  }

  std::string sample(const Tokenizer& tokenizer, int64_t step) {
    std::vector<int64_t> prompt;
    if (!options.prompt.empty()) {
      for (unsigned char c : options.prompt) prompt.push_back(c);
    } else if (tokenizer.eot() >= 0) {
      prompt.push_back(tokenizer.eot());
    } else {
      const Batch first = data.validation().batch(0, 1, seq);
      const int64_t n = std::min<int64_t>(16, seq);
      prompt.assign(first.inputs.begin(), first.inputs.begin() + n);
    }
    SampleOptions sample = options.sample;
    sample.seed = options.sample.seed + static_cast<uint64_t>(step);
    engine.eval();
    const std::vector<int64_t> tokens =
        generate([&](const at::Tensor& t) { return model.logits(t.to(device)).cpu(); }, model.max_seq(), prompt, sample);
    engine.train();
    const bool prompt_is_eot = prompt.size() == 1 && tokenizer.eot() >= 0 && prompt[0] == tokenizer.eot();
    return Tokenizer::printable(
        tokenizer.decode(std::vector<int64_t>(tokens.begin() + (prompt_is_eot ? 1 : 0), tokens.end())),
        tokenizer.vocab() == 256);
  }
};

}  // namespace

const std::string& builtin_config() {
  static const std::string text = R"({
  "train_micro_batch_size_per_gpu": 8,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "zero_optimization": {"stage": 2, "overlap_comm": true, "reduce_bucket_size": "auto"},
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.0}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 3e-4, "warmup_max_lr": 3e-3,
                "warmup_num_steps": 20, "total_num_steps": "auto", "warmup_type": "linear"}}
})";
  return text;
}

namespace {

// What the trainer knows of a model before the config is read (its width resolves "auto"
// values), and how to build it once the config is known.
struct ModelPlan {
  int64_t hidden_size = 0, vocab = 0, max_seq = 0;
  // Built over the data-parallel world (zero::Init partitions over it), with this rank's
  // tensor-parallel group when the config asks for one.
  std::function<std::unique_ptr<models::TrainableModel>(const Config&, World&, ParallelGrid* grid)> build;
};

// --device: where the model trains; a GPU named without an index ("cuda") is the one of this
// rank's local rank.
at::Device training_device(const TrainerOptions& options, const World& world) {
  at::Device device(options.device.empty() ? "cpu" : options.device);
  if (device.is_cuda() && !device.has_index()) {
    const int gpus = std::max<int>(1, static_cast<int>(torch::cuda::device_count()));
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(world.local_rank() % gpus));
  }
  return device;
}

ModelPlan plan_model(const TrainerOptions& options, at::Device device, std::optional<LlmcCheckpoint>& checkpoint,
                     std::optional<llama::HfModel>& hf) {
  // zero::Init keeps stage 3's shards in host memory: a model bound for a GPU is built whole on
  // the host, moved, and partitioned by the engine there.
  const bool on_cpu = device.is_cpu();
  if (!options.model_dir.empty()) {
    if (!options.init.empty()) throw Error("give --model or --init, not both", "--init");
    hf = llama::open_hf_model(options.model_dir);
    const llama::LlamaConfig& c = hf->config;
    const llama::LlamaExportOptions export_options{options.hf_max_shard_bytes};
    llama::LoraOptions lora = options.lora;
    lora.seed = static_cast<uint64_t>(options.seed);  // lora_A's draw, as the model's initialisation
    return {c.hidden_size, c.vocab_size, c.max_position_embeddings,
            [&hf, export_options, on_cpu, lora](const Config& config, World& w, ParallelGrid* grid) {
              return llama::make_llama(*hf, config, w, export_options, on_cpu, grid, lora);
            }};
  }
  GptShape shape = options.shape;
  if (!options.init.empty()) {
    checkpoint = read_llmc_checkpoint(options.init);
    shape = checkpoint->shape;
  }
  if (shape.padded_vocab == 0) shape.padded_vocab = (shape.vocab + 63) / 64 * 64;
  const LlmcCheckpoint* init = checkpoint ? &*checkpoint : nullptr;
  return {shape.channels, shape.vocab, shape.max_seq,
          [shape, init, path = options.init, on_cpu](const Config& config, World& w, ParallelGrid* grid) {
            if (grid) {
              throw Error("tensor and pipeline parallelism are built for the Llama family (--model DIR), not the GPT",
                          grid->stages() > 1 ? config.pipeline.key : config.tensor_parallel.key);
            }
            return make_gpt(shape, init, path, config, w, on_cpu);
          }};
}

}  // namespace

TrainerResult train_model(const TrainerOptions& options, World& whole_world, std::FILE* out) {
  if (whole_world.rank() != 0) out = nullptr;
  World& world = whole_world;  // every rank (the data-parallel ranks are `data_parallel` below)
  std::optional<LlmcCheckpoint> checkpoint;
  std::optional<llama::HfModel> hf;
  const at::Device device = training_device(options, world);
  const ModelPlan plan = plan_model(options, device, checkpoint, hf);
  const int64_t seq = options.seq == 0 ? plan.max_seq : options.seq;
  if (seq < 1 || seq > plan.max_seq)
    throw Error("--seq-len " + std::to_string(seq) + " must be in 1.." + std::to_string(plan.max_seq), "--seq-len");
  if (hf && options.seq == 0) throw Error("--seq-len is needed with --model (rows of how many tokens?)", "--seq-len");
  if (hf && options.sample_every > 0)
    throw Error("--sample-every with --model needs the model's tokenizer, which zero-train does not read yet",
                "--sample-every");
  Data data = load_data(options, static_cast<int>(plan.vocab));
  const Tokenizer tokenizer = options.tokenizer.empty() ? Tokenizer::bytes() : Tokenizer::from_llmc(options.tokenizer);

  Config config = load_config(options, whole_world, plan.hidden_size);
  // Tensor and pipeline parallelism: the model is split over groups of tensor_parallel.autotp_size
  // ranks and cut into pipeline stages, and from here on `data_parallel` is the world the engine,
  // the data and the loss see.
  std::optional<ParallelGrid> grid;
  const bool pipelined = config.pipeline.stages > 1;
  if (config.tensor_parallel.size > 1 || pipelined) {
    if (!device.is_cpu()) {
      throw Error("tensor and pipeline parallelism on a GPU are not built yet (their collectives are MPI's, on host "
                  "tensors)",
                  pipelined ? config.pipeline.key : config.tensor_parallel.key);
    }
    grid.emplace(whole_world, config.tensor_parallel.size, config.pipeline.stages);
  }
  World& data_parallel = grid ? grid->data_parallel() : whole_world;
  if (options.metrics_port >= 0) {
    config.prometheus.enabled = true;
    config.prometheus.port = options.metrics_port;
  }
  // State on NVMe: resident memory is the point, so large blocks are returned when freed
  // (include/zero/allocator.h; zero-train otherwise keeps freed memory for speed).
  if (config.zero.offload_optimizer.device == OffloadDevice::kNvme ||
      config.zero.offload_param.device == OffloadDevice::kNvme) {
    return_large_blocks();
  }
  torch::manual_seed(static_cast<uint64_t>(options.seed));
  const std::unique_ptr<models::TrainableModel> built =
      plan.build(config, data_parallel, grid ? &*grid : nullptr);
  models::TrainableModel& model = *built;
  checkpoint.reset();  // the llm.c weights are in the model now
  // DeepSpeed's pipeline.activation_checkpoint_interval: the pipeline's own checkpointing interval.
  model.set_checkpoint_every(pipelined && config.pipeline.activation_checkpoint_interval > 0
                                 ? config.pipeline.activation_checkpoint_interval
                                 : options.checkpoint_every);
  model.set_partition_activations(config.activation_checkpointing.partition_activations);
  model.module().to(device);  // before the engine is built, as DeepSpeed finds the model on its device
  Engine engine(model.module(), config, data_parallel, {}, model.model_parallel());
  // Tokens and model FLOPs per sample: tokens/s in the metrics, FLOP/s and MFU in the flops profiler.
  engine.set_model_cost({.tokens_per_sample = seq, .flops_per_sample = model.flops_per_token(seq) * seq});
  // Each rank's peak RSS once the model is built and the engine holds it (stage 3 from a Hugging
  // Face directory: one layer whole at a time; bench/llama_load_memory.sh).
  const std::vector<int64_t> load_rss = models::peak_rss_per_rank(world);
  const int64_t micro = config.train_micro_batch_size_per_gpu, accumulation = config.gradient_accumulation_steps;
  Run run{options, data_parallel, model, engine, data, seq, config.train_batch_size / accumulation, device};

  Report report(out, options.progress_bar, options.steps);
  report.line(fmt::format("zero-train: {} rank{}{}, ZeRO stage {}, {} ({} parameters)", world.size(),
                          world.size() == 1 ? "" : "s",
                          grid ? fmt::format(" ({}tensor-parallel {} x data-parallel {})",
                                             pipelined ? fmt::format("pipeline {} x ", grid->stages()) : "",
                                             config.tensor_parallel.size, data_parallel.size())
                               : "",
                          config.zero.stage, model.describe(), model.parameters()));
  report.line(
      fmt::format("zero-train: batch {} rows × {} tokens ({} per rank × {} micro-steps), {} steps, data {} "
                  "tokens{}",
                  config.train_batch_size, seq, micro, accumulation, options.steps, data.train.tokens(),
                  data.val ? fmt::format(", validation {} tokens", data.val->tokens()) : ""));

  if (const auto a = model.activation_bytes(micro, seq, std::max<int64_t>(1, options.checkpoint_every))) {
    // The activations of one micro-step on this rank (fp32 compute), as the model counts them.
    report.line(fmt::format(
        "zero-train: activations per rank ~{:.1f} MB without activation checkpointing, ~{:.1f} MB with it{}",
        a->first / 1e6, a->second / 1e6,
        options.checkpoint_every > 0
            ? (options.checkpoint_every == 1 ? std::string(" (on: every block)")
                                             : fmt::format(" (on: every {}th block)", options.checkpoint_every))
            : " (off: --activation-checkpointing)"));
  }
  report.line(fmt::format("zero-train: model built: peak RSS so far {} KiB per rank", fmt::join(load_rss, " ")));
  if (pipelined) {
    report.line("zero-train: pipeline " + model.describe_stages());
    run.pipeline_grid = &*grid;
    run.pipeline_options = pipeline::step_options(*grid, config);
  }
  TrainerResult result;
  int64_t start_step = 0;
  if (options.resume) {
    if (options.save_dir.empty()) throw Error("--resume needs --save-dir (where the checkpoints are)", "--resume");
    if (std::filesystem::exists(std::filesystem::path(options.save_dir) / "latest")) {
      const auto client = nlohmann::json::parse(engine.load_checkpoint(options.save_dir));
      start_step = client.at("step").get<int64_t>();
      report.line(fmt::format("zero-train: resumed from {} at step {}", options.save_dir, start_step));
    } else {
      report.line(fmt::format("zero-train: --resume: no checkpoint in {} yet, starting at step 0", options.save_dir));
    }
  }
  auto save = [&](int64_t steps_done) {
    nlohmann::json client = model.client_state();
    client["step"] = steps_done;
    client["shuffle"] = options.shuffle;
    client["seq"] = seq;
    result.saved.push_back(engine.save_checkpoint(options.save_dir, "", client.dump()));
    report.line(fmt::format("zero-train: saved {}/{}", options.save_dir, result.saved.back()));
  };
  SignalScope signals(options.stop_on_signal);
  // NVMe traffic and time per step, from the second step on (the first also records stage 3's
  // order and touches fresh memory); of the only step when there is one.
  SwapTraffic swap_before = engine.swap_traffic();
  // What crossed between hosts: the whole world's collectives, with tensor parallelism the
  // data-parallel and tensor-parallel groups', with expert parallelism the expert-parallel and
  // expert-data-parallel groups' (each counts its own; -1: one host, nothing crossed).
  const ModelParallelOptions layers = model.model_parallel();
  auto crossed = [&] {
    int64_t sum = world.communicator().inter_node_bytes();
    if (sum < 0) return sum;
    std::vector<World*> groups{layers.expert_parallel, layers.expert_data_parallel};
    if (grid) {
      groups.insert(groups.end(), {&grid->data_parallel(), &grid->tensor_parallel(), &grid->pipeline(), grid->first_and_last()});
      for (PipelineLink* link : {grid->activations_out(), grid->gradients_out()})
        if (link) groups.push_back(&link->pair());
    }
    for (World* group : groups)
      if (group) sum += std::max<int64_t>(0, group->communicator().inter_node_bytes());
    return sum;
  };
  int64_t inter_node_before = crossed();
  double step_seconds = 0;
  int64_t timed_steps = 0;
  for (int64_t step = start_step; step < options.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    auto micro_batch = [&](int64_t m) {
      Batch global = data.train.batch(step * accumulation + m, run.global_rows, seq, options.shuffle);
      Batch mine = data.train.rank_rows(global, data_parallel.rank(), data_parallel.size());
      return Run::Tokens{to_tensor(mine.inputs, micro, seq, run.device), to_tensor(mine.targets, micro, seq, run.device)};
    };
    if (pipelined) {
      // The step's micro-batches through the stages by 1F1B (zero/pipeline.h).
      loss_sum = pipeline::train_step(*grid, engine, run.stage_work(micro_batch), run.pipeline_options);
    } else {
      for (int64_t m = 0; m < accumulation; ++m) {
        const auto [x, y] = micro_batch(m);
        at::Tensor loss = engine.forward([&] { return model.loss(x, y); });
        engine.backward(loss);
        engine.step();
        loss_sum += loss.item<double>();
      }
    }
    // One small all-reduce gives the mean loss and whether any rank was asked to stop.
    at::Tensor shared = torch::tensor(
        {loss_sum / static_cast<double>(accumulation * data_parallel.size()), stop_requested() ? 1.0 : 0.0},
        torch::kDouble);
    data_parallel.communicator().all_reduce(shared, ReduceOp::kSum, {.async = false});
    if (grid) stop_anywhere(shared, grid->tensor_parallel());
    if (pipelined) stop_anywhere(shared, grid->pipeline());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    StepLog log{step + 1,
                shared[0].item<double>(),
                engine.get_lr(),
                engine.get_global_grad_norm(),
                engine.loss_scale(),
                static_cast<double>(config.train_batch_size * seq) / seconds,
                seconds * 1e3};
    result.steps.push_back(log);
    if (step == start_step && options.steps - start_step > 1) {
      swap_before = engine.swap_traffic();
      inter_node_before = crossed();
    } else {
      step_seconds += seconds;
      ++timed_steps;
    }
    const bool last = step + 1 == options.steps;
    if ((step + 1) % options.print_every == 0 || last || step == 0) {
      report.line(fmt::format("step {:5d}/{} | loss {:.6f} | lr {:.3e} | norm {:.4f}{} | {:.0f} tok/s | {:.1f} ms",
                              log.step, options.steps, log.loss, log.lr, log.grad_norm,
                              config.fp16.enabled ? fmt::format(" | scale {:g}", log.loss_scale) : std::string(),
                              log.tokens_per_second, log.milliseconds));
    }
    if (options.eval_every > 0 && ((step + 1) % options.eval_every == 0 || last)) {
      const double val = run.evaluate();
      result.val_losses.emplace_back(step + 1, val);
      report.line(fmt::format("val   {:5d}/{} | loss {:.6f}", step + 1, options.steps, val));
    }
    if (options.sample_every > 0 && ((step + 1) % options.sample_every == 0 || last)) {
      result.samples.push_back(run.sample(tokenizer, step + 1));
      report.line(fmt::format("sample {:4d}/{} ---\n{}\n---", step + 1, options.steps, result.samples.back()));
    }
    report.progress(step + 1, seconds);
    const bool stop = shared[1].item<double>() > 0;
    if (!options.save_dir.empty() &&
        (last || stop || (options.save_every > 0 && (step + 1) % options.save_every == 0))) {
      save(step + 1);
    }
    if (stop) {
      result.interrupted = true;
      report.line(fmt::format("zero-train: stopped by a signal after step {}", step + 1));
      break;
    }
  }
  const int64_t inter_node = crossed();  // before the report's own collectives
  report.finish();
  {
    // What an operator compares across runs and tools: the largest peak RSS of any rank, and this
    // rank's model-state bytes (parameters, gradients, master weights, optimizer state, buckets).
    const std::vector<int64_t> rss = models::peak_rss_per_rank(world);
    const MemoryReport memory = engine.memory_report();
    report.line(fmt::format("zero-train: peak RSS {} KiB (largest rank; per rank: {}), model state {} bytes on rank 0{}",
                            *std::max_element(rss.begin(), rss.end()), fmt::join(rss, " "), memory.total(),
                            memory.experts.total() > 0 ? fmt::format(" ({} of them the experts')", memory.experts.total())
                                                       : std::string()));
    const SwapTraffic swap = engine.swap_traffic();
    if (swap.bytes_read + swap.bytes_written > 0 && timed_steps > 0) {
      report.line(fmt::format(
          "zero-train: NVMe per step on rank 0: read {} bytes, written {} bytes; mean step {:.3f} s ({} steps)",
          (swap.bytes_read - swap_before.bytes_read) / timed_steps,
          (swap.bytes_written - swap_before.bytes_written) / timed_steps, step_seconds / timed_steps, timed_steps));
    }
    if (world.num_nodes() > 1 && inter_node >= 0 && timed_steps > 0) {
      // What crossed between hosts through the world's collectives (the engine's and this loop's).
      const std::vector<int64_t> sent = models::gather_per_rank(world, (inter_node - inter_node_before) / timed_steps);
      report.line(fmt::format("zero-train: sent across nodes per step: {} bytes by rank ({} hosts); mean step {:.3f} s ({} steps)",
                              fmt::join(sent, " "), world.num_nodes(), step_seconds / timed_steps, timed_steps));
    }
  }
  if (config.activation_checkpointing.profile && options.checkpoint_every > 0) {
    // DeepSpeed's activation_checkpointing.profile: where the recomputation's time goes.
    report.line("zero-train: activation checkpoints (rank 0): name, calls, forward s, recomputation s, backward s");
    for (const auto& p : checkpointing::profile())
      report.line(fmt::format("  {:<6} {:>6} {:>10.3f} {:>10.3f} {:>10.3f}", p.name, p.calls, p.forward_seconds,
                              p.recompute_seconds, p.backward_seconds));
  }
  const OpStats gathers = engine.comm_stats().total(CollectiveOp::kAllGather);
  result.all_gather_calls = gathers.calls;
  result.all_gather_seconds = gathers.seconds;
  result.memory = engine.memory_report();
  if (pipelined) {
    const pipeline::PipelineBytes bytes = pipeline::pipeline_bytes(*grid);
    result.pipeline_sent = bytes.sent;
    result.pipeline_received = bytes.received;
    if (const int64_t steps = options.steps - start_step; steps > 0) {
      report.line(fmt::format("zero-train: pipeline point to point per step on rank 0: sent {} bytes, received {} bytes",
                              bytes.sent / steps, bytes.received / steps));
    }
  }
  if (std::vector<models::TrainableModel::ExpertLoad> load = model.tokens_per_expert(); !load.empty()) {
    // The load balance: every data-parallel rank's counts summed.
    std::vector<int64_t> flat;
    for (const auto& layer : load) flat.insert(flat.end(), layer.tokens.begin(), layer.tokens.end());
    at::Tensor summed = torch::tensor(flat, torch::kLong);
    data_parallel.communicator().all_reduce(summed, ReduceOp::kSum, {.async = false});
    std::vector<std::string> lines;
    int64_t at = 0;
    for (auto& layer : load) {
      for (int64_t& tokens : layer.tokens) tokens = summed[at++].item<int64_t>();
      lines.push_back(fmt::format("layer {}: {}", layer.layer, fmt::join(layer.tokens, " ")));
      result.tokens_per_expert.push_back(layer.tokens);
    }
    report.line("zero-train: tokens per expert over the run, all ranks: " + fmt::format("{}", fmt::join(lines, "; ")));
  }
  if (const CommStats* exchange = model.model_parallel().expert_stats) {
    result.expert_parallel_all_to_all = exchange->total(CollectiveOp::kAllToAll);
    if (const int64_t steps = options.steps - start_step; steps > 0) {
      const OpStats& a = result.expert_parallel_all_to_all;
      report.line(fmt::format("zero-train: expert-parallel exchange per step and rank: all-to-all {} bytes ({} to other "
                              "ranks) in {} calls",
                              a.message_bytes / steps, static_cast<int64_t>(a.bus_bytes) / steps, a.calls / steps));
    }
  }
  if (grid) {
    result.tensor_parallel_all_reduce = grid->layer_stats().total(CollectiveOp::kAllReduce);
    result.tensor_parallel_all_gather = grid->layer_stats().total(CollectiveOp::kAllGather);
    result.tensor_parallel_reduce_scatter = grid->layer_stats().total(CollectiveOp::kReduceScatter);
    if (const int64_t steps = options.steps - start_step; steps > 0) {
      const OpStats& ar = result.tensor_parallel_all_reduce;
      const OpStats& ag = result.tensor_parallel_all_gather;
      const OpStats& rs = result.tensor_parallel_reduce_scatter;
      report.line(fmt::format("zero-train: tensor-parallel collectives per step and rank: all-reduce {} bytes in {} "
                              "calls{}",
                              ar.message_bytes / steps, ar.calls / steps,
                              ag.calls + rs.calls == 0
                                  ? std::string()
                                  : fmt::format(", all-gather {} bytes in {} calls, reduce-scatter {} bytes in {} calls",
                                                ag.message_bytes / steps, ag.calls / steps, rs.message_bytes / steps,
                                                rs.calls / steps)));
    }
  }
  if (!options.export_path.empty()) {
    model.export_final(engine, data_parallel, options.export_path);
    report.line("zero-train: wrote " + options.export_path);
  }
  return result;
}

}  // namespace zero::gpt
