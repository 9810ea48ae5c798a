// zero-config json FILE — prints the file as zerocpp's Hjson reader sees it, as JSON.
// zero-config check FILE — validates a DeepSpeed config and prints every effective value with
// where it came from (file, default, auto, deprecated alias). Exit 0 when valid, 1 otherwise.
#include <fmt/core.h>

#include <CLI/CLI.hpp>

#include "zero/config.h"
#include "zero/error.h"

int main(int argc, char** argv) {
  CLI::App app{"zero-config: check a DeepSpeed JSON config the way zerocpp reads it"};
  app.require_subcommand(1);
  CLI::App* check = app.add_subcommand("check", "validate FILE and print every effective value");
  std::string file;
  zero::AutoContext ctx;
  ctx.allow_unresolved = true;
  int64_t hidden = 0, micro = 0, accumulation = 0, warmup = -1, max_steps = 0;
  double lr = -1, max_grad_norm = -1;
  check->add_option("FILE", file, "the DeepSpeed JSON config")->required();
  check->add_option("--world-size", ctx.world_size, "number of ranks the batch triad is resolved for")
      ->check(CLI::PositiveNumber);
  check->add_option("--hidden-size", hidden, "model hidden size, for \"auto\" bucket sizes")
      ->check(CLI::PositiveNumber);
  check->add_option("--micro-batch", micro, "trainer's per-rank micro batch, for \"auto\"")->check(CLI::PositiveNumber);
  check->add_option("--grad-accum", accumulation, "trainer's gradient accumulation steps, for \"auto\"")
      ->check(CLI::PositiveNumber);
  check->add_option("--lr", lr, "trainer's learning rate, for \"auto\"")->check(CLI::NonNegativeNumber);
  check->add_option("--warmup-steps", warmup, "trainer's warmup steps, for \"auto\"")->check(CLI::NonNegativeNumber);
  check->add_option("--max-steps", max_steps, "trainer's total steps, for \"auto\"")->check(CLI::PositiveNumber);
  check->add_option("--max-grad-norm", max_grad_norm, "trainer's clipping norm, for \"auto\"")
      ->check(CLI::NonNegativeNumber);
  bool strict = false;
  check->add_flag("--strict", strict,
                  "unknown keys and \"auto\" values no rule resolves are errors (also: \"zerocpp\": {\"strict\": true})");
  CLI::App* as_json = app.add_subcommand("json", "print FILE (JSON or Hjson) as JSON, as zerocpp reads it");
  std::string json_file;
  as_json->add_option("FILE", json_file, "the DeepSpeed config")->required();
  CLI11_PARSE(app, argc, argv);
  if (*as_json) {
    try {
      fmt::print("{}\n", zero::Config::document_as_json(json_file));
      return 0;
    } catch (const zero::Error& e) {
      fmt::print(stderr, "{}\n", e.what());
      return 1;
    }
  }

  if (hidden) ctx.hidden_size = hidden;
  if (micro) ctx.micro_batch_size = micro;
  if (accumulation) ctx.gradient_accumulation_steps = accumulation;
  if (lr >= 0) ctx.learning_rate = lr;
  if (warmup >= 0) ctx.warmup_steps = warmup;
  if (max_steps) ctx.max_steps = max_steps;
  if (max_grad_norm >= 0) ctx.max_grad_norm = max_grad_norm;
  ctx.allow_unresolved = !strict;
  try {
    zero::Config config = zero::Config::parse_file(file, strict);
    config.resolve(ctx);
    size_t width = 0;
    for (const auto& v : config.values()) width = std::max(width, v.path.size());
    fmt::print("{}: valid for world size {}{}\n", file, ctx.world_size,
               config.tensor_parallel.size > 1 || config.pipeline.stages > 1
                   ? fmt::format(" ({}tensor-parallel {} x data-parallel {}: the batch counts data-parallel ranks{})",
                                 config.pipeline.stages > 1 ? fmt::format("pipeline {} x ", config.pipeline.stages) : "",
                                 config.tensor_parallel.size, config.world_size,
                                 config.pipeline.stages > 1
                                     ? fmt::format(", {} micro-batches per step through the stages",
                                                   config.gradient_accumulation_steps)
                                     : "")
                   : "");
    for (const auto& v : config.values()) {
      fmt::print("  {:<{}}  {:<24}  {}\n", v.path, width, v.value, zero::to_string(v.source));
    }
    for (const auto& w : config.warnings()) fmt::print("warning: {}\n", w);
    if (!config.unresolved().empty()) {
      fmt::print("{} \"auto\" value(s) left unresolved: pass the flags they need\n", config.unresolved().size());
    }
    return 0;
  } catch (const zero::Error& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // e.g. a LibTorch kernel missing for a dtype: one line, no abort
    fmt::print(stderr, "{}\n", zero::first_line(e));
    return 1;
  }
}
