// Engine checkpoints: resuming is bitwise exact at the same world size (stages 0-2, fp16 scaler
// state included); a checkpoint loads at another world size and stage. Damaged checkpoints and
// ones from elsewhere: engine_checkpoint_damage_test.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/consolidate.h"
#include "checkpoint/reader.h"
#include "models/tiny/tiny_transformer.h"
#include "tests/dist/dist_test_world.h"
#include "tests/dist/engine_checkpoint_util.h"
#include "tests/dist/engine_test_util.h"
#include "tests/safetensors_read.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/init.h"

using engine_test::Mlp;
using namespace checkpoint_test;
namespace fs = std::filesystem;

TEST(EngineCheckpoint, ResumeIsBitwiseExactAtTheSameWorldSize) {
  for (auto [stage, fp16] : {std::pair{0, false}, {1, false}, {2, false}, {2, true}}) {
    JobDir dir("resume");
    Session straight(config(stage, fp16), test_world(), 42, fp16);
    straight.run(0, 5);
    const double scale_at_save = straight.engine->loss_scale();
    const std::string tag = straight.engine->save_checkpoint(dir.path.string(), "", R"({"next_step": 5})");
    EXPECT_EQ(tag, "global_step5");
    const std::vector<double> expected = straight.run(5, 10);

    Session resumed(config(stage, fp16), test_world(), 7, fp16);  // other initial weights: all must come from the file
    EXPECT_EQ(resumed.engine->load_checkpoint(dir.path.string()), R"({"next_step":5})");
    EXPECT_EQ(resumed.engine->global_steps(), 5);
    EXPECT_EQ(resumed.engine->loss_scale(), scale_at_save);
    const std::vector<double> got = resumed.run(5, 10);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], expected[i]) << "stage " << stage << " fp16 " << fp16 << " step " << i + 5;
    EXPECT_EQ(resumed.engine->loss_scale(), straight.engine->loss_scale());
    EXPECT_EQ(resumed.engine->get_lr(), straight.engine->get_lr());
    if (fp16) EXPECT_GT(straight.engine->skipped_steps(), 0) << "the scaler state was not exercised";
  }
}

// A checkpoint does not record where the states lived: saved with the optimizer in memory, on the
// CPU (offload) or on NVMe (streamed out of its swap file tile by tile), it resumes in any other
// of these, bit for bit.
TEST(EngineCheckpoint, OffloadedAndInMemoryRunsResumeEachOther) {
  enum Mode { kMemory, kCpu, kNvme };
  auto with = [](int stage, Mode mode, const std::string& nvme) {
    std::string json = config(stage);
    const std::string anchor = R"("reduce_bucket_size": 100)";
    std::string blocks = R"(, "sub_group_size": 96)";  // several tiles per rank on NVMe
    if (mode == kCpu) blocks += R"(, "offload_optimizer": {"device": "cpu"})";
    if (mode == kNvme)
      blocks += R"(, "offload_optimizer": {"device": "nvme", "nvme_path": ")" + nvme + R"(", "pipeline_read": true})";
    if (mode != kMemory && stage == 3) blocks += R"(, "offload_param": {"device": "cpu"})";
    json.replace(json.find(anchor), anchor.size(), anchor + blocks);
    return json;
  };
  const char* names[] = {"memory", "cpu", "nvme"};
  for (int stage : {2, 3}) {
    for (auto [saved, loaded] : {std::pair{kCpu, kMemory}, {kMemory, kCpu}, {kNvme, kMemory}, {kMemory, kNvme},
                                 {kNvme, kNvme}, {kCpu, kNvme}}) {
      JobDir dir("offload");
      const std::string nvme = (dir.path / "nvme").string();
      fs::create_directories(nvme);
      Session straight(with(stage, saved, nvme), test_world());
      straight.run(0, 5);
      straight.engine->save_checkpoint((dir.path / "ckpt").string());
      const std::vector<double> expected = straight.run(5, 10);
      Session resumed(with(stage, loaded, nvme), test_world(), 7);
      resumed.engine->load_checkpoint((dir.path / "ckpt").string());
      EXPECT_EQ(resumed.engine->global_steps(), 5);
      EXPECT_EQ(resumed.run(5, 10), expected)
          << "stage " << stage << ": saved with the optimizer in " << names[saved] << ", loaded in " << names[loaded];
    }
  }
}

TEST(EngineCheckpoint, LoadsAtAnotherWorldSizeAndStage) {
  JobDir dir("anywhere");
  // Saved by every rank of this job at stage 2; loaded by one process at stages 0 and 1.
  Session straight(config(2), test_world());
  straight.run(0, 4);
  straight.engine->save_checkpoint(dir.path.string());
  const std::vector<double> expected = straight.run(4, 8);
  zero::World single = zero::World::single_process();
  for (int stage : {0, 1}) {
    Session other(config(stage), single, 9);
    other.engine->load_checkpoint(dir.path.string());
    const std::vector<double> got = other.run(4, 8);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5 * expected[i]) << "stage " << stage;
  }
  // The reverse: one process saves at stage 0, every rank loads at stage 2.
  test_world().communicator().barrier({.async = false});
  if (test_world().rank() == 0) {
    Session one(config(0), single);
    one.run(0, 4);
    one.engine->save_checkpoint((dir.path / "from_one").string(), "four");
  }
  test_world().communicator().barrier({.async = false});
  Session many(config(2), test_world(), 11);
  zero::LoadOptions options;
  options.tag = "four";
  many.engine->load_checkpoint((dir.path / "from_one").string(), options);
  const std::vector<double> got = many.run(4, 8);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5 * expected[i]) << "into stage 2";
}

TEST(EngineCheckpoint, AFailedLoadChangesNothingOnAnyRank) {
  // The last rank's random-state file is damaged. Every rank checks all it will read before any
  // rank writes: no engine's weights, master or optimizer state move (at stage 0 the fp32
  // master is the parameters themselves), and training goes on as if no load had been tried.
  const int last = test_world().size() - 1;
  for (int stage : {0, 1}) {
    JobDir dir("failed_load" + std::to_string(stage));
    Session saved(config(stage), test_world());
    saved.run(0, 2);
    saved.engine->save_checkpoint(dir.path.string(), "saved");
    test_world().communicator().barrier({.async = false});
    if (test_world().rank() == 0) {
      std::fstream f(dir.path / "saved" / ("rank" + std::to_string(last) + ".rng"),
                     std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(3);
      f.put('\x7f');
    }
    test_world().communicator().barrier({.async = false});
    Session live(config(stage), test_world(), 7), untouched(config(stage), test_world(), 7);
    live.run(0, 1);
    const std::vector<double> expected = untouched.run(0, 3);
    std::vector<at::Tensor> before;
    for (const auto& p : live.model->parameters()) before.push_back(p.detach().clone());
    const std::string e = error_of([&] { live.engine->load_checkpoint(dir.path.string()); });
    EXPECT_NE(
        e.find(test_world().rank() == last ? ".rng: checksum mismatch" : "failed on rank " + std::to_string(last)),
        std::string::npos)
        << e;
    for (size_t i = 0; i < before.size(); ++i)
      EXPECT_TRUE(live.model->parameters()[i].equal(before[i])) << "stage " << stage << " parameter " << i;
    const std::vector<double> got = live.run(1, 3);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], expected[i + 1]) << "stage " << stage << " step " << i + 1;
  }
}

namespace {

// The small transformer (four units) on fixed global batches of 24 rows, whatever the world.
struct UnitSession {
  std::shared_ptr<zero::models::TinyTransformer> model;
  std::unique_ptr<zero::Engine> engine;
  zero::World& world;
  zero::Config cfg;
  UnitSession(int stage, zero::World& w, uint64_t seed) : world(w) {
    cfg = zero::Config::parse(R"({"train_batch_size": 24, "gradient_clipping": 1.0,
        "zero_optimization": {"stage": )" +
                              std::to_string(stage) + R"(, "stage3_param_persistence_threshold": 0},
        "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}}})");
    cfg.resolve({.world_size = w.size()});
    zero::Init init(cfg, w);  // stage 3: built partitioned
    torch::manual_seed(seed);
    model = std::make_shared<zero::models::TinyTransformer>(options());
    engine = std::make_unique<zero::Engine>(*model, cfg, w);
  }
  static zero::models::TinyTransformerOptions options() {
    return {.vocab = 64, .channels = 32, .heads = 4, .layers = 4, .max_seq = 16};
  }
  std::vector<double> run(int from, int to) {
    std::vector<double> losses;
    const int64_t micro = cfg.train_micro_batch_size_per_gpu, first = world.rank() * micro;
    for (int step = from; step < to; ++step) {
      auto [tokens, targets] = zero::models::tiny_batch(24, options(), 100 + step);
      at::Tensor loss =
          engine->forward([&] { return model->loss(tokens.narrow(0, first, micro), targets.narrow(0, first, micro)); });
      engine->backward(loss);
      engine->step();
      at::Tensor mean = loss.detach().to(torch::kDouble).reshape({1});
      world.communicator().all_reduce(mean, zero::ReduceOp::kAvg, {.async = false});
      losses.push_back(mean.item<double>());
    }
    return losses;
  }
};

}  // namespace

TEST(EngineCheckpoint, Stage3ResumesBitwiseAndLoadsAtAnyStage) {
  JobDir dir("stage3");
  UnitSession straight(3, test_world(), 42);
  straight.run(0, 5);
  straight.engine->save_checkpoint(dir.path.string());
  {
    const zero::checkpoint::CheckpointReader reader(dir.path.string());
    const auto& m = reader.manifest();
    EXPECT_EQ(m.at("world_size"), test_world().size());
    EXPECT_EQ(m.at("stage"), 3);
    EXPECT_EQ(m.at("config").at("zero_optimization.stage"), 3);  // the effective config, key by key
    EXPECT_EQ(m.at("config").at("optimizer.params.lr"), 0.003);
    EXPECT_EQ(m.at("rng_states").size(), static_cast<size_t>(test_world().size()));
  }
  const std::vector<double> expected = straight.run(5, 10);

  UnitSession resumed(3, test_world(), 7);  // other initial weights: all must come from the file
  resumed.engine->load_checkpoint(dir.path.string());
  EXPECT_EQ(resumed.run(5, 10), expected) << "stage 3 resume is not bitwise";

  // Saved at stage 3 by this job's ranks; one process loads it at stages 0 and 1.
  zero::World single = zero::World::single_process();
  for (int stage : {0, 1}) {
    UnitSession other(stage, single, 9);
    other.engine->load_checkpoint(dir.path.string());
    const std::vector<double> got = other.run(5, 10);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5 * expected[i]) << "stage " << stage;
  }
  // The reverse: one process saves at stage 0, every rank loads at stage 3.
  test_world().communicator().barrier({.async = false});
  if (test_world().rank() == 0) {
    UnitSession one(0, single, 42);
    one.run(0, 5);
    one.engine->save_checkpoint((dir.path / "from_one").string());
  }
  test_world().communicator().barrier({.async = false});
  UnitSession many(3, test_world(), 11);
  many.engine->load_checkpoint((dir.path / "from_one").string());
  const std::vector<double> got = many.run(5, 10);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5 * expected[i]) << "into stage 3";
}

TEST(EngineCheckpoint, ConsolidateWritesSafetensorsByTheSpec) {
  JobDir dir("consolidate");
  UnitSession session(3, test_world(), 42);
  session.run(0, 3);
  session.engine->save_checkpoint(dir.path.string(), "", R"({"note": "kept"})");
  session.engine->gather_parameters();
  test_world().communicator().barrier({.async = false});
  if (test_world().rank() != 0) return;
  for (auto [dtype, name, scalar] : {std::tuple{zero::checkpoint::OutputDtype::kFp32, "F32", torch::kFloat},
                                     std::tuple{zero::checkpoint::OutputDtype::kBf16, "BF16", torch::kBFloat16},
                                     std::tuple{zero::checkpoint::OutputDtype::kFp16, "F16", torch::kHalf}}) {
    const std::string out = (dir.path / (std::string(name) + ".safetensors")).string();
    const auto result =
        zero::checkpoint::consolidate({.dir = dir.path.string(), .tag = "", .out = out, .dtype = dtype});
    const SafetensorsFile file = read_safetensors(out);
    EXPECT_EQ(file.metadata.at("format"), "pt");
    EXPECT_EQ(file.metadata.at("global_steps"), "3");
    EXPECT_EQ(file.header.size(), session.model->named_parameters().size());
    EXPECT_EQ(result.tensors, static_cast<int64_t>(file.header.size()));
    for (const auto& item : session.model->named_parameters()) {
      const at::Tensor expected = item.value().detach().to(scalar);
      const auto& entry = file.header.at(item.key());
      EXPECT_EQ(entry.at("dtype"), name) << item.key();
      EXPECT_EQ(entry.at("shape").get<std::vector<int64_t>>(), expected.sizes().vec()) << item.key();
      const auto begin = entry.at("data_offsets").at(0).get<uint64_t>(),
                 end = entry.at("data_offsets").at(1).get<uint64_t>();
      ASSERT_EQ(end - begin, static_cast<uint64_t>(expected.nbytes())) << item.key();
      const at::Tensor saved = torch::from_blob(const_cast<char*>(file.data.data() + begin), expected.sizes(), scalar);
      EXPECT_TRUE(saved.equal(expected)) << name << " " << item.key() << ": not the trained weights, rounded";
    }
  }
}

TEST(EngineCheckpoint, EachRanksRandomStateComesBackAtTheSameWorldSize) {
  JobDir dir("rng");
  Session saved(config(2), test_world());
  saved.run(0, 2);
  torch::manual_seed(500 + static_cast<uint64_t>(test_world().rank()));  // a different stream per rank
  torch::rand({7});
  saved.engine->save_checkpoint(dir.path.string());
  const at::Tensor expected = torch::rand({3});

  Session resumed(config(2), test_world(), 7);
  torch::manual_seed(9);
  resumed.engine->load_checkpoint(dir.path.string());
  EXPECT_TRUE(torch::rand({3}).equal(expected)) << "rank " << test_world().rank() << ": not its saved random state";

  // Another world size: states per rank mean nothing there; the current one is kept.
  zero::World single = zero::World::single_process();
  Session other(config(1), single, 7);
  torch::manual_seed(9);
  const at::Tensor untouched = torch::rand({3});
  torch::manual_seed(9);
  other.engine->load_checkpoint(dir.path.string());
  if (test_world().size() > 1) EXPECT_TRUE(torch::rand({3}).equal(untouched));
  // A damaged random-state file is an error naming it.
  test_world().communicator().barrier({.async = false});
  if (test_world().rank() == 0) {
    std::fstream f(dir.path / "global_step2" / "rank0.rng", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(10);
    f.put('\x55');
  }
  test_world().communicator().barrier({.async = false});
  const std::string error = error_of([&] { resumed.engine->load_checkpoint(dir.path.string()); });
  EXPECT_NE(error.find(test_world().rank() == 0 ? "rank0.rng: checksum mismatch" : "failed on rank 0"),
            std::string::npos)
      << error;
}

TEST(EngineCheckpoint, SixteenBitWeightsAreStoredAsSuch) {
  JobDir dir("sixteen");
  Session session(config(2, /*fp16=*/true), test_world(), 42, true);
  session.run(0, 3);
  session.engine->save_checkpoint(dir.path.string());
  test_world().communicator().barrier({.async = false});
  if (test_world().rank() != 0) return;
  zero::checkpoint::CheckpointReader reader(dir.path.string());
  EXPECT_EQ(reader.params16_dtype(), "Half");
  for (const auto& item : session.model->named_parameters()) {
    const int p = reader.find(item.key());
    ASSERT_GE(p, 0) << item.key();
    at::Tensor stored = torch::empty(item.value().sizes(), torch::kHalf);
    reader.read16(p, 0, reader.numel(p), reinterpret_cast<uint16_t*>(stored.data_ptr()));
    EXPECT_TRUE(stored.equal(item.value().detach())) << item.key() << ": not the model's fp16 weights";
  }
}

namespace {

// Plain LibTorch (no engine): AdamW (lr 0.01, weight decay 0.01) with clip_grad_norm_(0.5) on
// the whole global batch of each step, as Session::run feeds the engine. `state` carries the
// model and the optimizer between calls; a fresh optimizer starts its moments and step count anew.
struct PlainAdamW {
  Mlp model;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  PlainAdamW() { fresh_optimizer(); }
  void fresh_optimizer() {
    optimizer = std::make_unique<torch::optim::AdamW>(model.parameters(),
                                                      torch::optim::AdamWOptions(0.01).weight_decay(0.01));
  }
  std::vector<double> run(int from, int to) {
    std::vector<double> losses;
    for (int step = from; step < to; ++step) {
      torch::manual_seed(1000 + step);
      at::Tensor x = torch::randn({engine_test::kGlobalBatch, 16}), y = engine_test::teacher(x);
      optimizer->zero_grad();
      at::Tensor loss = model.loss(x, y);
      loss.backward();
      torch::nn::utils::clip_grad_norm_(model.parameters(), 0.5);
      optimizer->step();
      losses.push_back(loss.item<double>());
    }
    return losses;
  }
};

std::string constant_lr_config(int stage) {
  return R"({"train_batch_size": 48, "gradient_accumulation_steps": 2, "gradient_clipping": 0.5,
             "zero_optimization": {"stage": )" +
         std::to_string(stage) + R"(, "reduce_bucket_size": 100},
             "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}}})";
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * want[i]) << what << " step " << i;
}

}  // namespace

TEST(EngineCheckpoint, LoadOptionsAgainstPlainLibTorch) {
  // Saved after 5 steps; the next 5 after loading must be what plain LibTorch gives when it
  // continues with its optimizer state (all states) or restarts it (load_optimizer_states =
  // false, load_module_only), from the saved weights.
  JobDir dir("load_options");
  for (int stage : {0, 2, 3}) {
    const std::string json = constant_lr_config(stage);
    Session saved(json, test_world());
    saved.run(0, 5);
    saved.engine->save_checkpoint(dir.path.string(), "s" + std::to_string(stage));

    torch::manual_seed(42);
    PlainAdamW plain;
    plain.run(0, 5);
    PlainAdamW restarted;  // the saved weights, a fresh optimizer
    {
      torch::NoGradGuard no_grad;
      auto from = plain.model.parameters(), to = restarted.model.parameters();
      for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
    }
    const std::vector<double> continued = plain.run(5, 10), anew = restarted.run(5, 10);
    const std::string at = " at stage " + std::to_string(stage) + ", " + std::to_string(test_world().size()) + " ranks";

    struct Case {
      zero::LoadOptions options;
      const std::vector<double>& want;
      int64_t steps_after_load;
      const char* what;
    };
    for (const Case& c : std::vector<Case>{
             {{.tag = "s" + std::to_string(stage)}, continued, 5, "all states"},
             {{.tag = "s" + std::to_string(stage), .load_optimizer_states = false}, anew, 5, "no optimizer states"},
             {{.tag = "s" + std::to_string(stage), .load_module_only = true}, anew, 0, "module only"}}) {
      Session loaded(json, test_world(), /*init_seed=*/7);  // other initial weights: all must be replaced
      loaded.engine->load_checkpoint(dir.path.string(), c.options);
      EXPECT_EQ(loaded.engine->global_steps(), c.steps_after_load) << c.what << at;
      expect_close(loaded.run(5, 10), c.want, std::string(c.what) + at);
    }
  }
}

TEST(EngineCheckpoint, LrSchedulerStatesFalseRestartsTheSchedule) {
  // WarmupLR over 8 steps, saved after 5: with the scheduler state the next lr is the 6th of the
  // warmup; without it, the first again, as a fresh engine's.
  JobDir dir("load_lr");
  Session saved(config(2), test_world());
  saved.run(0, 5);
  saved.engine->save_checkpoint(dir.path.string());
  Session fresh(config(2), test_world());
  Session with_schedule(config(2), test_world(), 7), without(config(2), test_world(), 7);
  with_schedule.engine->load_checkpoint(dir.path.string());
  without.engine->load_checkpoint(dir.path.string(), {.load_lr_scheduler_states = false});
  EXPECT_DOUBLE_EQ(with_schedule.engine->get_lr(), saved.engine->get_lr());
  EXPECT_DOUBLE_EQ(without.engine->get_lr(), fresh.engine->get_lr());
  EXPECT_NE(saved.engine->get_lr(), fresh.engine->get_lr());  // or the case tests nothing
}
