// zero-train — trains llm.c's GPT-2 with ZeRO from a DeepSpeed config (first version: the core
// flags; evaluation, sampling, checkpoints and the progress bar are still to come).
//
//   zero-run -n 2 build/apps/zero-train --config examples/configs/gpt_zero2.json --text README.md
#include <fmt/core.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>

#include "models/gpt/gpt.h"
#include "models/gpt/token_data.h"
#include "zero/zero.h"

namespace {

at::Tensor to_tensor(const std::vector<int32_t>& values, int64_t rows, int64_t seq) {
  return torch::tensor(values, torch::kInt).to(torch::kLong).view({rows, seq});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zero-train: GPT-2 (llm.c layout) trained with ZeRO from a DeepSpeed config"};
  std::string config_path, init, text, train_data, export_path;
  zero::gpt::GptShape shape{.max_seq = 64, .vocab = 256, .layers = 2, .heads = 4, .channels = 64, .padded_vocab = 0};
  int64_t seq = 0, steps = 50, seed = 1234, print_every = 1;
  app.add_option("--config", config_path, "DeepSpeed JSON config")->required()->check(CLI::ExistingFile);
  app.add_option("--init", init, "start from an llm.c checkpoint (version 3)")->check(CLI::ExistingFile);
  app.add_option("--layers", shape.layers, "L, for a fresh model");
  app.add_option("--heads", shape.heads, "NH, for a fresh model");
  app.add_option("--channels", shape.channels, "C, for a fresh model");
  app.add_option("--max-seq", shape.max_seq, "maxT, for a fresh model");
  app.add_option("--vocab", shape.vocab, "V, for a fresh model (256 for --text)");
  app.add_option("--text", text, "train on the bytes of this file (V = 256)")->check(CLI::ExistingFile);
  app.add_option("--train-data", train_data, "llm.c token shards (a glob)");
  app.add_option("--seq-len", seq, "T of each row (default: maxT)");
  app.add_option("--steps", steps, "optimizer steps");
  app.add_option("--seed", seed, "initialisation seed");
  app.add_option("--print-every", print_every, "print a line every K steps");
  app.add_option("--export", export_path, "write the trained weights as an llm.c checkpoint");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);

  try {
    zero::World world = zero::World::from_environment();
    if (text.empty() == train_data.empty()) throw zero::Error("give exactly one of --text or --train-data", "--text");
    std::optional<zero::gpt::LlmcCheckpoint> checkpoint;
    if (!init.empty()) {
      checkpoint = zero::gpt::read_llmc_checkpoint(init);
      shape = checkpoint->shape;
    }
    if (shape.padded_vocab == 0) shape.padded_vocab = (shape.vocab + 63) / 64 * 64;
    if (seq == 0) seq = shape.max_seq;
    if (seq > shape.max_seq)
      throw zero::Error("--seq-len " + std::to_string(seq) + " exceeds the model's maxT", "--seq-len");
    const zero::gpt::TokenData data = text.empty() ? zero::gpt::TokenData::from_shards(train_data, shape.vocab)
                                                   : zero::gpt::TokenData::from_text(text);
    if (!text.empty() && shape.vocab != 256)
      throw zero::Error("--text trains bytes: the model needs --vocab 256", "--vocab");

    zero::Config config = zero::Config::from_file(
        config_path, {.world_size = world.size(), .hidden_size = shape.channels, .max_steps = steps});
    torch::manual_seed(seed);
    auto model = std::make_shared<zero::gpt::Gpt>(shape);
    if (checkpoint) zero::gpt::load_llmc(*model, *checkpoint, init);
    zero::Engine engine(*model, config, world);
    const int64_t micro = config.train_micro_batch_size_per_gpu, accumulation = config.gradient_accumulation_steps;
    const int64_t global_rows = config.train_batch_size / accumulation;  // rows of one micro-step, all ranks
    if (world.rank() == 0) {
      fmt::print("zero-train: {} ranks, ZeRO stage {}, {} parameters, batch {} × {} tokens, {} steps\n", world.size(),
                 config.zero.stage, zero::gpt::checkpoint_numel(shape), config.train_batch_size, seq, steps);
    }
    for (int64_t step = 0; step < steps; ++step) {
      auto start = std::chrono::steady_clock::now();
      double loss_sum = 0;
      for (int64_t m = 0; m < accumulation; ++m) {
        zero::gpt::Batch global = data.batch(step * accumulation + m, global_rows, seq);
        zero::gpt::Batch mine = data.rank_rows(global, world.rank(), world.size());
        at::Tensor x = to_tensor(mine.inputs, micro, seq), y = to_tensor(mine.targets, micro, seq);
        at::Tensor loss = engine.forward([&] { return model->loss(x, y); });
        engine.backward(loss);
        engine.step();
        loss_sum += loss.item<double>();
      }
      at::Tensor mean = torch::full({1}, loss_sum / static_cast<double>(accumulation), torch::kDouble);
      world.communicator().all_reduce(mean, zero::ReduceOp::kAvg, {.async = false});
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (world.rank() == 0 && (step % print_every == 0 || step == steps - 1)) {
        fmt::print("step {:4d}/{} | loss {:.6f} | lr {:.2e} | norm {:.4f}{} | {:.0f} tok/s | {:.1f} ms\n", step + 1,
                   steps, mean.item<double>(), engine.get_lr(), engine.get_global_grad_norm(),
                   config.fp16.enabled ? fmt::format(" | scale {:g}", engine.loss_scale()) : std::string(),
                   static_cast<double>(config.train_batch_size * seq) / seconds, seconds * 1e3);
      }
    }
    if (!export_path.empty() && world.rank() == 0) {
      zero::gpt::write_llmc_checkpoint(export_path, shape, zero::gpt::to_llmc_params(*model));
      fmt::print("zero-train: wrote {}\n", export_path);
    }
    return 0;
  } catch (const zero::Error& e) {
    fmt::print(stderr, "zero-train: {}\n", e.what());
    return 1;
  }
}
