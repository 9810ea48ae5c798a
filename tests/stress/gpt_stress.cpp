// zero_stress — the engine at sizes where buffers are in flight, against stage 0 (scripts/stress runs its whole matrix).
//
//   mpirun -np N zero_stress --model gpt23m|wide --matrix full|subset [--steps 3]
//
// Trains the GPT through the same loop as zero-train (train_model) once per configuration of the
// matrix, all in one job: stage × overlap_comm × reduce_bucket_size at stages 1-2; stage 3 ×
// overlap_comm × stage3_prefetch_bucket_size (0 / small / default) × stage3_max_live_parameters ×
// stage3_max_reuse_distance; each in fp32 and bf16, with gradient accumulation 1 and 2. Every
// run is compared with stage 0 of the same precision and accumulation at this world size: the
// losses of every step and the exported weights, bitwise where the reductions sum in the same
// order (2 ranks without accumulation: a + b either way), else within 1e-5 relative (fp32), or
// for bf16 losses within 1e-3 and weights within 4 bf16 ulps (relative to max(|w|, 1e-2)). SGD with momentum, not Adam:
// its update is linear in the gradient, so a wrong scale shows, and a different summation order does not (Adam's first
// steps move every weight by about lr · sign(g), which flips for gradients near zero). Rank 0 prints a line per run and
// "N passed, N failed"; the exit status is 1 when any run fails.
//
// The models: gpt23m is the GPT (L=6, NH=8, C=512, V=8192: 23.2 M parameters; a stage-3
// unit is 3.1 M parameters, 12 MiB, 12 reduction pieces of 1 MiB); wide (L=3, NH=4, C=320,
// V=2048: 4.4 M) has units of 1.2 M parameters (4.7 pieces) and, with the small bucket of 1.5 M,
// stage-1/2 buckets of 6 pieces. Rows are short (T=32): the number of tokens changes nothing of
// what is in flight, only the time.
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "models/gpt/llmc_files.h"
#include "models/common/trainer.h"
#include "zero/allocator.h"
#include "zero/error.h"
#include "zero/world.h"

namespace {

using zero::gpt::GptShape;

struct Run {
  int stage = 0;
  bool overlap = true, bf16 = false;
  int gas = 1;
  int64_t bucket = 0, prefetch = -1, max_live = -1, reuse = -1;  // -1 / 0 bucket: DeepSpeed's default
  std::string name() const {
    std::string s = "stage " + std::to_string(stage) + (bf16 ? " bf16" : " fp32") + " gas " + std::to_string(gas);
    if (stage == 0) return s;
    s += overlap ? " overlap" : " no-overlap";
    if (bucket > 0) s += " bucket " + std::to_string(bucket);
    if (prefetch >= 0) s += " prefetch " + std::to_string(prefetch);
    if (max_live >= 0) s += " max_live " + std::to_string(max_live);
    if (reuse >= 0) s += " reuse " + std::to_string(reuse);
    return s;
  }
  std::string config(int world) const {
    std::string zero = "\"stage\": " + std::to_string(stage) + ", \"overlap_comm\": " + (overlap ? "true" : "false");
    if (bucket > 0) zero += ", \"reduce_bucket_size\": " + std::to_string(bucket);
    if (prefetch >= 0) zero += ", \"stage3_prefetch_bucket_size\": " + std::to_string(prefetch);
    if (max_live >= 0) zero += ", \"stage3_max_live_parameters\": " + std::to_string(max_live);
    if (reuse >= 0) zero += ", \"stage3_max_reuse_distance\": " + std::to_string(reuse);
    return "{\"train_batch_size\": " + std::to_string(2 * gas * world) +
           ", \"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": " + std::to_string(gas) +
           ", \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.05, \"momentum\": 0.9}}, "
           "\"zero_allow_untested_optimizer\": true" +
           (bf16 ? ", \"bf16\": {\"enabled\": true}" : "") + ", \"zero_optimization\": {" + zero + "}}";
  }
};

// The matrix for one precision and accumulation. `unit`: a stage-3 unit's parameters, less its
// padding: the "small" prefetch bucket is just below a unit (only smaller ones are prefetched).
std::vector<Run> matrix(bool full, bool bf16, int gas, int64_t unit, int64_t small_bucket) {
  std::vector<Run> runs;
  for (int stage : {1, 2}) {
    for (bool overlap : {true, false}) {
      for (int64_t bucket : {small_bucket, int64_t{0}}) {
        if (!full && (stage == 1 || !overlap)) continue;
        runs.push_back({.stage = stage, .overlap = overlap, .bf16 = bf16, .gas = gas, .bucket = bucket});
      }
    }
  }
  for (bool overlap : {true, false}) {
    for (int64_t prefetch : {int64_t{0}, unit, int64_t{-1}}) {
      // (max_live, reuse): the defaults (everything stays whole from forward to backward), reuse
      // off (every unit is freed after its forward), and at most two units whole at once.
      for (auto [max_live, reuse] : std::vector<std::pair<int64_t, int64_t>>{{-1, -1}, {-1, 0}, {2 * unit, 0}}) {
        if (!full && (!overlap || (prefetch == 0 && max_live < 0 && reuse < 0))) continue;
        runs.push_back({.stage = 3,
                        .overlap = overlap,
                        .bf16 = bf16,
                        .gas = gas,
                        .prefetch = prefetch,
                        .max_live = max_live,
                        .reuse = reuse});
      }
    }
  }
  return runs;
}

struct Outcome {
  std::vector<double> losses;
  std::vector<float> weights;  // rank 0 only
};

Outcome train(const Run& run, const GptShape& shape, const std::string& tokens, const std::string& dir, int steps,
              zero::World& world) {
  zero::gpt::TrainerOptions o;
  o.config_text = run.config(world.size());
  o.shape = shape;
  o.train_data = tokens;
  o.seq = 32;
  o.steps = steps;
  o.print_every = steps + 1;  // silent (out is null anyway)
  o.export_path = dir + "/weights.bin";
  auto result = zero::gpt::train_model(o, world, nullptr);
  Outcome out;
  for (const auto& s : result.steps) out.losses.push_back(s.loss);
  if (world.rank() == 0) out.weights = zero::gpt::read_llmc_checkpoint(o.export_path).params;
  return out;
}

// Largest |a - b| / max(|b|, floor) over both sequences; 0 means bitwise equal.
double max_relative(const std::vector<double>& a, const std::vector<double>& b, double floor = 1e-3) {
  double worst = a.size() == b.size() ? 0 : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), floor));
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zero_stress: the engine at realistic sizes against stage 0"};
  std::string model = "wide", which = "subset";
  int steps = 3;
  app.add_option("--model", model, "gpt23m or wide")->check(CLI::IsMember({"gpt23m", "wide"}));
  app.add_option("--matrix", which, "full or subset")->check(CLI::IsMember({"full", "subset"}));
  app.add_option("--steps", steps, "optimizer steps per run");
  CLI11_PARSE(app, argc, argv);
  try {
    zero::keep_freed_memory();  // as zero-train, whose loop it runs (include/zero/allocator.h)
    torch::set_num_threads(1);
    zero::World world = zero::World::from_environment();
    const bool big = model == "gpt23m";
    const GptShape shape = big ? GptShape{.max_seq = 64, .vocab = 8192, .layers = 6, .heads = 8, .channels = 512}
                               : GptShape{.max_seq = 64, .vocab = 2048, .layers = 3, .heads = 4, .channels = 320};
    const int64_t unit = 12LL * shape.channels * shape.channels + 13LL * shape.channels;
    const int64_t small_bucket = 1'500'000;
    // Each rank writes the same random tokens into a directory of its own (ranks may not share one).
    at::Tensor pid = torch::full({1}, static_cast<int64_t>(getpid()), torch::kLong);
    world.communicator().broadcast(pid, 0, {.async = false});
    const auto dir = std::filesystem::temp_directory_path() /
                     ("zero_stress." + std::to_string(pid.item<int64_t>()) + ".r" + std::to_string(world.rank()));
    std::filesystem::create_directories(dir);
    torch::manual_seed(13);
    at::Tensor ids = torch::randint(shape.vocab, {200'000}, torch::kInt);
    std::vector<uint16_t> tokens(ids.data_ptr<int>(), ids.data_ptr<int>() + ids.numel());
    const std::string token_file = (dir / "tokens.bin").string();
    zero::gpt::write_token_shard(token_file, tokens);

    int passed = 0, failed = 0;
    const bool full = which == "full";
    for (bool bf16 : {false, true}) {
      for (int gas : {1, 2}) {
        if (!full && bf16 && gas == 2) continue;
        const Run reference{.stage = 0, .bf16 = bf16, .gas = gas};
        const Outcome expected = train(reference, shape, token_file, dir.string(), steps, world);
        for (const Run& run : matrix(full, bf16, gas, unit, small_bucket)) {
          const Outcome got = train(run, shape, token_file, dir.string(), steps, world);
          if (world.rank() != 0) continue;
          const double loss_diff = max_relative(got.losses, expected.losses);
          const double weight_diff =
              max_relative(std::vector<double>(got.weights.begin(), got.weights.end()),
                           std::vector<double>(expected.weights.begin(), expected.weights.end()), bf16 ? 1e-2 : 1e-3);
          // At two ranks without accumulation every stage sums the same two numbers as stage 0's
          // all-reduce; accumulation adds micro-steps before (stages 0-1) or after (2-3) reducing.
          const bool bitwise = world.size() == 2 && gas == 1;
          // bf16 with accumulation: stages 0-1 add the micro-steps in bf16 .grad, stages 2-3 in
          // fp32 (DeepSpeed's grad_accum_dtype; zerocpp warns), so weights may differ by a few bf16
          // ulps (2^-8 relative each; measured up to 2 ulps, both equally far from fp32's).
          const double tolerance = bitwise ? 0 : (bf16 ? 1.0 / 64 : 1e-5);
          const bool ok = loss_diff <= (bf16 && !bitwise ? 1e-3 : tolerance) && weight_diff <= tolerance;
          (ok ? passed : failed)++;
          std::printf("%s %-70s losses %.3g weights %.3g (%s)\n", ok ? "ok  " : "FAIL", run.name().c_str(), loss_diff,
                      weight_diff, bitwise ? "bitwise" : "tolerance");
          std::fflush(stdout);
        }
      }
    }
    std::filesystem::remove_all(dir);
    // Rank 0 judged: every rank exits with its verdict.
    at::Tensor any_failed = torch::full({1}, failed, torch::kInt);
    world.communicator().broadcast(any_failed, 0, {.async = false});
    if (world.rank() == 0)
      std::printf("zero_stress %s %d ranks: %d passed, %d failed\n", model.c_str(), world.size(), passed, failed);
    return any_failed.item<int>() == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zero_stress: %s\n", e.what());
    return 1;
  }
}
