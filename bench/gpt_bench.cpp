// bench_gpt — tokens/s of zero-train's own loop (models/common/trainer) at ZeRO stages 0, 1 and 2:
// the GPT on the built-in corpus, the micro-batch fixed per rank (so the global batch grows with
// the ranks), fp32, one thread per rank.
//
//   zero-run -n 2 build/bench/bench_gpt [--steps N] [--layers L] [--channels C] [--seq T]
// Prints one table row per stage and overlap_comm setting (rank 0): median step time and tokens/s over the timed steps.
#include <fmt/core.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <utility>
#include <vector>

#include "models/common/trainer.h"
#include "zero/allocator.h"
#include "zero/world.h"
#include "programs.h"

namespace bench_gpt {

int run(int argc, char** argv) {
  CLI::App app{"bench_gpt: zero-train tokens/s per ZeRO stage"};
  int64_t steps = 20, warmup = 3, micro = 8;
  zero::gpt::TrainerOptions o;
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--layers", o.shape.layers);
  app.add_option("--channels", o.shape.channels);
  app.add_option("--seq", o.shape.max_seq);
  app.add_option("--micro-batch", micro);
  bool default_malloc = false;
  app.add_flag("--default-malloc", default_malloc,
               "leave glibc's malloc thresholds as they are (as zero-train does not)");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  if (!default_malloc) zero::keep_freed_memory();  // include/zero/allocator.h
  zero::World world = zero::World::from_environment();
  o.steps = warmup + steps;
  if (world.rank() == 0) {
    fmt::print(
        "# bench_gpt: {} rank(s), GPT-2 L={} NH={} C={} T={} V=256, micro-batch {} per rank, fp32, AdamW, "
        "{} timed steps after {} warm-up, malloc {}\n\n",
        world.size(), o.shape.layers, o.shape.heads, o.shape.channels, o.shape.max_seq, micro, steps, warmup,
        default_malloc ? "glibc defaults" : "keep_freed_memory()");
    fmt::print(
        "| stage | overlap_comm | step ms (median) | tokens/s | tokens/s per rank | all-gathers per step | ms per "
        "all-gather |\n|---|---|---|---|---|---|---|\n");
    // Stage 3 rows name their stage3_param_persistence_threshold (0 shards every unit parameter),
    // whether the next unit is prefetched, and stage3_max_reuse_distance (0: a unit is gathered
    // again for its backward; all: DeepSpeed's default, it stays whole from forward to backward). "ms per all-gather" of a prefetch runs from its
    // launch to its wait, so it includes the computation it overlapped.
  }
  // A discarded run first: the first steps of a process are slower (caches, heap growth).
  o.config_text = R"({"train_micro_batch_size_per_gpu": 8, "optimizer": {"type": "AdamW"}})";
  zero::gpt::train_model(o, world, nullptr);
  struct Row {
    int stage;
    bool overlap;
    int64_t persistence;  // stage 3: parameters up to this many elements stay whole
    int64_t prefetch;     // stage 3: stage3_prefetch_bucket_size (0: gather on demand only)
    int64_t reuse = 0;    // stage 3: stage3_max_reuse_distance (0: only the last unit stays for backward)
  };
  const int64_t auto_persistence = 10 * o.shape.channels;  // DeepSpeed's "auto"
  const int64_t on = 50'000'000;
  const int64_t keep = 1'000'000'000;  // DeepSpeed's default reuse distance: every unit kept for its backward
  for (auto [stage, overlap, persistence, prefetch, reuse] :
       {Row{0, false, 0, on}, Row{0, true, 0, on}, Row{1, false, 0, on}, Row{1, true, 0, on}, Row{2, false, 0, on},
        Row{2, true, 0, on}, Row{3, true, 0, 0}, Row{3, true, 0, on}, Row{3, true, 0, on, keep},
        Row{3, true, auto_persistence, on, keep}}) {
    o.config_text = fmt::format(R"({{"train_micro_batch_size_per_gpu": {}, "gradient_clipping": 1.0,
        "zero_optimization": {{"stage": {}, "overlap_comm": {}, "stage3_param_persistence_threshold": {},
                              "stage3_prefetch_bucket_size": {}, "stage3_max_reuse_distance": {}}},
        "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-3}}}}}})",
                                micro, stage, overlap, persistence, prefetch, reuse);
    const zero::gpt::TrainerResult r = zero::gpt::train_model(o, world, nullptr);
    std::vector<double> ms;
    for (size_t i = static_cast<size_t>(warmup); i < r.steps.size(); ++i) ms.push_back(r.steps[i].milliseconds);
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    const double tokens = static_cast<double>(micro * world.size() * o.shape.max_seq);
    if (world.rank() == 0)
      fmt::print("| {} | {} | {:.1f} | {:.0f} | {:.0f} | {:.1f} | {:.3f} |\n",
                 stage == 3 ? fmt::format("3 (persist ≤ {}, {}, reuse {})", persistence,
                                          prefetch > 0 ? "prefetch" : "on demand", reuse == keep ? "all" : "0")
                            : std::to_string(stage),
                 overlap, median, tokens / median * 1e3, tokens / median * 1e3 / world.size(),
                 static_cast<double>(r.all_gather_calls) / static_cast<double>(r.steps.size()),
                 r.all_gather_calls > 0 ? r.all_gather_seconds * 1e3 / static_cast<double>(r.all_gather_calls) : 0.0);
  }
  return 0;
}

}  // namespace bench_gpt
