// What the checkpoint tests share: a directory of the job, the MLP config, a session that
// trains on the same global batches whatever the world, and the error a call throws.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/dist/dist_test_world.h"
#include "tests/dist/engine_test_util.h"
#include "zero/engine.h"
#include "zero/error.h"

namespace checkpoint_test {

namespace fs = std::filesystem;
using engine_test::Mlp;


// A directory shared by the ranks of this job (named after rank 0's pid), removed at the end.
struct JobDir {
  fs::path path;
  explicit JobDir(const std::string& name) {
    at::Tensor pid = torch::full({1}, static_cast<int64_t>(getpid()), torch::kLong);
    test_world().communicator().broadcast(pid, 0, {.async = false});
    path = fs::temp_directory_path() / ("zero_ckpt_" + name + "." + std::to_string(pid.item<int64_t>()));
  }
  ~JobDir() {
    test_world().communicator().barrier({.async = false});
    if (test_world().rank() == 0) fs::remove_all(path);
  }
};

inline std::string config(int stage, bool fp16 = false) {
  std::string fp16_block =
      fp16 ? R"(, "fp16": {"enabled": true, "initial_scale_power": 24, "loss_scale_window": 3})" : "";
  return R"({"train_batch_size": 48, "gradient_accumulation_steps": 2, "gradient_clipping": 0.5,
             "zero_optimization": {"stage": )" +
         std::to_string(stage) + R"(, "reduce_bucket_size": 100},
             "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
             "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.01,
                                                          "warmup_num_steps": 8}})" +
         fp16_block + "}";
}

// A model and its engine, trained on the same global batches whatever the world.
struct Session {
  std::shared_ptr<Mlp> model;
  std::unique_ptr<zero::Engine> engine;
  zero::World& world;
  zero::Config cfg;
  Session(const std::string& json, zero::World& w, uint64_t init_seed = 42, bool fp16 = false) : world(w) {
    cfg = zero::Config::parse(json);
    cfg.resolve({.world_size = w.size()});
    torch::manual_seed(init_seed);
    model = std::make_shared<Mlp>(fp16);
    engine = std::make_unique<zero::Engine>(*model, cfg, w);
  }
  // Global mean losses of steps [from, to).
  std::vector<double> run(int from, int to) {
    std::vector<double> losses;
    const int64_t micro = cfg.train_micro_batch_size_per_gpu, ranks = world.size();
    for (int step = from; step < to; ++step) {
      torch::manual_seed(1000 + step);
      at::Tensor x = torch::randn({engine_test::kGlobalBatch, 16}), y = engine_test::teacher(x);
      double sum = 0;
      for (int64_t m = 0; m < cfg.gradient_accumulation_steps; ++m) {
        const int64_t first = (m * ranks + world.rank()) * micro;
        at::Tensor xs = x.narrow(0, first, micro), ys = y.narrow(0, first, micro);
        at::Tensor loss = engine->forward([&] { return model->loss(xs, ys); });
        engine->backward(loss);
        engine->step();
        sum += loss.item<double>();
      }
      at::Tensor mean = torch::full({1}, sum / static_cast<double>(cfg.gradient_accumulation_steps), torch::kDouble);
      world.communicator().all_reduce(mean, zero::ReduceOp::kAvg, {.async = false});
      losses.push_back(mean.item<double>());
    }
    return losses;
  }
};

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const zero::Error& e) {
    return e.what();
  }
  return "";
}


}  // namespace checkpoint_test
