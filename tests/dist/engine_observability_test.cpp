// What the operator sees (docs/observability.md), from a real engine under mpirun: the comms
// logger's bytes per step against the theoretical volume of each stage (DESIGN §6), the
// wall-clock breakdown's arithmetic and its line, the memory lines, and the CSV monitor's rows.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "dist_test_world.h"
#include "models/tiny/tiny_transformer.h"
#include "tiny_step.h"
#include "zero/engine.h"

namespace {

using zero::models::TinyTransformer;

// A model whose buckets span several 1 MiB reduction pieces (3 MB per block), with several
// reductions in flight (overlap_comm, 200 k-element buckets at stages 0-2).
zero::models::TinyTransformerOptions sized_options() {
  zero::models::TinyTransformerOptions o;
  o.channels = 256;
  o.layers = 4;
  o.vocab = 256;
  return o;
}

zero::Config observed_config(int stage, const std::string& extra = "") {
  zero::Config c = zero::Config::parse(R"({"train_batch_size": 24, "comms_logger": {"enabled": true},
      "zero_optimization": {"stage": )" + std::to_string(stage) +
                                       R"(, "overlap_comm": true, "reduce_bucket_size": 200000,
        "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 0,
        "stage3_max_live_parameters": 0, "stage3_max_reuse_distance": 0},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001}})" +
                                       extra + "}");
  c.resolve({.world_size = test_world().size()});
  return c;
}

// The comms logger's total from its summary line ("sent by this rank ...: N bytes").
double logged_bytes(const zero::Engine& engine) {
  static const std::regex total(R"(sent by this rank in these collectives: ([0-9]+) bytes)");
  std::smatch m;
  const std::string summary = engine.comms_summary();
  if (!std::regex_search(summary, m, total)) {
    ADD_FAILURE() << "no total in the comms summary:\n" << summary;
    return -1;
  }
  return std::stod(m[1].str());
}

int64_t unit_bucket_numel(int64_t n, int64_t quantum) { return (n + quantum - 1) / quantum * quantum; }

// What rank 0 prints over `steps` stage-2 steps with these config keys; the last step's breakdown.
std::string stdout_of_steps(const std::string& extra, int steps, zero::StepBreakdown* breakdown = nullptr) {
  torch::manual_seed(7);
  auto model = std::make_shared<TinyTransformer>(sized_options());
  const zero::Config config = observed_config(2, extra);
  zero::Engine engine(*model, config, test_world());
  testing::internal::CaptureStdout();
  for (int step = 0; step < steps; ++step) tiny_step(engine, *model, config.train_micro_batch_size_per_gpu, step);
  if (breakdown) *breakdown = engine.last_step_breakdown();
  return testing::internal::GetCapturedStdout();
}

}  // namespace

TEST(Observability, CommsLoggerBytesPerStepEqualTheTheoreticalVolume) {
  const int n = test_world().size();
  const double share = static_cast<double>(n - 1) / n;
  for (int stage : {0, 1, 2, 3}) {
    torch::manual_seed(7);
    auto model = std::make_shared<TinyTransformer>(sized_options());
    const zero::Config config = observed_config(stage);
    zero::Engine engine(*model, config, test_world());
    int64_t numel = 0, unit_padded = 0;
    for (const auto& p : model->parameters()) numel += p.numel();
    for (const auto& block : model->blocks) {
      int64_t unit = 0;
      for (const auto& p : block->parameters()) unit += p.numel();
      unit_padded += unit_bucket_numel(unit, 8 * n);  // each unit a bucket padded to n × the fp32 alignment
    }
    const int64_t padded = numel + engine.memory_report().padding_elements;  // Ψ as the buckets hold it
    const int64_t micro = config.train_micro_batch_size_per_gpu;
    tiny_step(engine, *model, micro, 0);  // stage 3 records the units' order
    const double before = logged_bytes(engine);
    tiny_step(engine, *model, micro, 1);
    tiny_step(engine, *model, micro, 2);
    const double per_step = (logged_bytes(engine) - before) / 2;
    // Every row carries the communicator's scope: across nodes (ZERO_RANKS_PER_NODE splits one
    // machine into several in the tests) or within one.
    const std::string scope = test_world().num_nodes() > 1 ? "  inter-node  " : "  intra-node  ";
    EXPECT_NE(engine.comms_summary().find(scope), std::string::npos) << engine.comms_summary();
    EXPECT_EQ(engine.comms_summary().find(test_world().num_nodes() > 1 ? "  intra-node  " : "  inter-node  "),
              std::string::npos);
    // DESIGN §6 in bytes (fp32), per rank and step: stage 0 all-reduces Ψ (2Ψ(N-1)/N); stages 1-2
    // reduce-scatter and all-gather Ψ ((N-1)/N each); stage 3 gathers every unit twice (forward,
    // backward: nothing kept with max_live 0) and the root once after the step. Stages 1-3 add
    // the global norm's all-reduce of one double; stage 3 its check that every rank gathered
    // the units in the same order (an all-reduce of two int64, engine/gather_order.cpp).
    double expected = 0;
    if (stage == 0) {
      expected = 2 * share * padded * 4;
    } else if (stage < 3) {
      expected = 2 * share * padded * 4 + 2 * share * 8;
    } else {
      const int64_t root = padded - unit_padded;
      expected = share * 4 * (padded + 2 * unit_padded + root) + 2 * share * 8 + 2 * share * 16;
    }
    // (N-1)/N of a byte count is whole at 2 and 4 ranks; at 3 the summary's whole bytes round it.
    EXPECT_NEAR(per_step, expected, n == 3 ? 1.0 : 0.0) << std::fixed << "logged " << per_step << ", expected " << expected << ": stage " << stage << ", " << n << " ranks, Ψ " << numel << " (padded " << padded
                                  << ")";
  }
}

TEST(Observability, WallClockBreakdownAddsUpAndPrintsMinMaxMeanOnRankZero) {
  zero::StepBreakdown b;
  const std::string out = stdout_of_steps(R"(, "wall_clock_breakdown": true, "steps_per_print": 2)", 4, &b);
  EXPECT_GT(b.forward, 0);
  EXPECT_GT(b.backward_inner, 0);
  EXPECT_GE(b.backward, b.backward_inner + b.backward_reduce);
  EXPECT_GE(b.step, b.optimizer + b.optimizer_allgather);
  // The phases are disjoint intervals inside the step's wall time.
  EXPECT_GE(b.wall, b.forward + b.backward + b.step);
  if (test_world().size() > 1) {
    EXPECT_GT(b.reduce_scatter, 0);
    EXPECT_GT(b.all_gather, 0);
  }
  const std::regex line(R"(\[Rank 0\] step (2|4): time \(ms\) per step over the last 2 steps, mean/min/max over [0-9]+ ranks? \| fwd: [0-9.]+/[0-9.]+/[0-9.]+ \| bwd: .* \| step: .* \| optimizer_step: .* \| total: [0-9.]+/[0-9.]+/[0-9.]+\n)");
  const auto lines = std::distance(std::sregex_iterator(out.begin(), out.end(), line), std::sregex_iterator());
  EXPECT_EQ(lines, test_world().rank() == 0 ? 2 : 0) << out;
}

TEST(Observability, MemoryBreakdownPrintsAfterForwardBackwardAndStep) {
  const std::string out = stdout_of_steps(R"(, "memory_breakdown": true, "steps_per_print": 3)", 3);
  for (const char* after : {"forward", "backward", "step"}) {
    const std::regex line(std::string(R"(\[Rank 0\] memory after )") + after +
                          R"( \(step 3\) \| model state MB: parameters [0-9.]+, .* \| allocator MB: live [0-9.]+, peak [0-9.]+ \| RSS MB: [0-9.]+, peak [0-9.]+)");
    EXPECT_EQ(std::regex_search(out, line), test_world().rank() == 0) << after << ":\n" << out;
  }
}

TEST(Observability, CsvMonitorWritesDeepSpeedsEventsOnRankZero) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "zerocpp_observability_csv";
  if (test_world().rank() == 0) std::filesystem::remove_all(dir);
  test_world().communicator().barrier({.async = false});
  torch::manual_seed(7);
  auto model = std::make_shared<TinyTransformer>(sized_options());
  const zero::Config config = observed_config(
      1, R"(, "csv_monitor": {"enabled": true, "output_path": ")" + dir.string() + R"(", "job_name": "job"},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.001, "warmup_num_steps": 4}})");
  std::vector<double> lrs;  // after each step
  {
    zero::Engine engine(*model, config, test_world());
    for (int step = 0; step < 3; ++step) {
      tiny_step(engine, *model, config.train_micro_batch_size_per_gpu, step);
      lrs.push_back(engine.get_lr());
    }
  }
  test_world().communicator().barrier({.async = false});  // every rank's engine is gone
  if (test_world().rank() != 0) return;
  std::ifstream lr_file(dir / "job" / "Train_Samples_lr.csv");
  ASSERT_TRUE(lr_file) << "no " << (dir / "job" / "Train_Samples_lr.csv");
  std::string header, row;
  std::getline(lr_file, header);
  EXPECT_EQ(header, "step,lr\r");
  // DeepSpeed's step is the global sample count after the optimizer step; the lr is the one the
  // next step will use (printed as Python's repr: it reads back exactly).
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(std::getline(lr_file, row)) << "row " << step;
    const auto comma = row.find(',');
    EXPECT_EQ(std::stoll(row.substr(0, comma)), 24 * step);
    EXPECT_EQ(std::stod(row.substr(comma + 1)), lrs[static_cast<size_t>(step - 1)]) << row;
  }
  EXPECT_FALSE(std::getline(lr_file, row)) << "a row more than the steps: did another rank write? " << row;
  EXPECT_TRUE(std::filesystem::exists(dir / "job" / "Train_Samples_train_loss.csv"));
}
