// Shared by the engine tests: a small MLP, data with something to learn, and a training loop
// that records the global loss and the final weights.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "layout/bucket_layout.h"
#include "zero/engine.h"

namespace engine_test {

constexpr int kSteps = 20;

// Where the engine tests train: ZERO_TEST_DEVICE (e.g. "cuda", "cuda:0"; default the CPU). The
// data are drawn on the CPU and moved there, so every device sees the same numbers; the plain
// LibTorch references run on the same device.
inline at::Device test_device() {
  const char* d = std::getenv("ZERO_TEST_DEVICE");
  return d && *d ? at::Device(d) : at::Device(at::kCPU);
}
constexpr int64_t kGlobalBatch = 48;  // divisible by every ranks × accumulation used below

// With compute_in_fp32 the forward casts the weights to fp32 (CPU LibTorch 1.13 has no fp16
// matmul); their gradients still come back in the parameters' own dtype.
struct Mlp : torch::nn::Module {
  explicit Mlp(bool compute_in_fp32 = false) : fp32_compute(compute_in_fp32) {
    fc1 = register_module("fc1", torch::nn::Linear(16, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 8));
  }
  at::Tensor forward(const at::Tensor& x) {
    if (!fp32_compute) return fc2(torch::tanh(fc1(x.to(fc1->weight.scalar_type()))));
    namespace F = torch::nn::functional;
    at::Tensor h = torch::tanh(F::linear(x, fc1->weight.to(torch::kFloat), fc1->bias.to(torch::kFloat)));
    return F::linear(h, fc2->weight.to(torch::kFloat), fc2->bias.to(torch::kFloat));
  }
  // The loss in fp32 (CPU LibTorch 1.13 has no bf16 mse_loss).
  at::Tensor loss(const at::Tensor& x, const at::Tensor& y) { return torch::mse_loss(forward(x).to(torch::kFloat), y); }
  bool fp32_compute;
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

inline std::string config_json(int stage, int accumulation, bool overlap) {
  return R"({"train_batch_size": 48, "gradient_accumulation_steps": )" + std::to_string(accumulation) +
         R"(, "gradient_clipping": 0.5,
      "zero_optimization": {"stage": )" +
         std::to_string(stage) + R"(, "reduce_bucket_size": 100,
                            "overlap_comm": )" +
         (overlap ? "true" : "false") + R"(},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.01, "warmup_num_steps": 5}}})";
}

// Targets from a fixed function, so that the loss has something to learn.
inline at::Tensor teacher(const at::Tensor& x) {
  static const at::Tensor w = [] {
    torch::manual_seed(7);
    return torch::randn({16, 8}) * 0.5;
  }();
  return torch::tanh(x.matmul(w));
}

struct Trajectory {
  std::vector<double> losses;  // global mean loss per step
  std::vector<at::Tensor> weights;
};

struct TrainOptions {
  bool compute_in_fp32 = false;
  // Applied to each micro-step's loss before backward (e.g. to inject an overflow).
  std::function<at::Tensor(const at::Tensor& loss, int step)> perturb;
  // After each optimizer step (the boundary micro-step).
  std::function<void(const zero::Engine& engine, Mlp& model, int step)> after_step;
};

// Trains the MLP for kSteps on `world`; rank r takes its contiguous rows of each micro-batch.
inline Trajectory train(const std::string& json, zero::World& world, const TrainOptions& options = {}) {
  torch::manual_seed(42);
  auto model = std::make_shared<Mlp>(options.compute_in_fp32);
  model->to(test_device());
  zero::Config config = zero::Config::parse(json);
  config.resolve({.world_size = world.size()});
  zero::Engine engine(*model, config, world);
  const int64_t micro = config.train_micro_batch_size_per_gpu, ranks = world.size();
  Trajectory t;
  for (int step = 0; step < kSteps; ++step) {
    torch::manual_seed(1000 + step);
    at::Tensor x = torch::randn({kGlobalBatch, 16}), y = teacher(x);
    x = x.to(test_device());
    y = y.to(test_device());
    double loss_sum = 0;
    for (int64_t m = 0; m < config.gradient_accumulation_steps; ++m) {
      const int64_t first = (m * ranks + world.rank()) * micro;
      at::Tensor xs = x.narrow(0, first, micro), ys = y.narrow(0, first, micro);
      at::Tensor loss = engine.forward([&] { return model->loss(xs, ys); });
      engine.backward(options.perturb ? options.perturb(loss, step) : loss);
      engine.step();
      loss_sum += loss.item<double>();
    }
    if (options.after_step) options.after_step(engine, *model, step);
    at::Tensor mean =
        torch::full({1}, loss_sum / static_cast<double>(config.gradient_accumulation_steps), torch::kDouble);
    world.communicator().all_reduce(mean, zero::ReduceOp::kAvg, {.async = false});
    t.losses.push_back(mean.item<double>());
  }
  EXPECT_EQ(engine.global_steps(), kSteps);
  for (const auto& p : model->parameters()) t.weights.push_back(p.detach().to(at::kCPU, torch::kFloat).clone());
  return t;
}

// A fresh MLP engine for `json` on `world` after one micro-step, to inspect its counters.
struct OneStep {
  std::shared_ptr<Mlp> model;
  std::unique_ptr<zero::Engine> engine;
};
inline OneStep one_step(const std::string& json, zero::World& world) {
  zero::Config config = zero::Config::parse(json);
  config.resolve({.world_size = world.size()});
  torch::manual_seed(42);
  OneStep s{std::make_shared<Mlp>(), nullptr};
  s.engine = std::make_unique<zero::Engine>(*s.model, config, world);
  s.engine->backward(s.model->loss(torch::randn({4, 16}), torch::randn({4, 8})));
  s.engine->step();
  return s;
}

// The layout the engine gives the MLP: reverse registration order, fp32 alignment 8, buckets of
// 100 elements (config_json's reduce_bucket_size).
inline zero::layout::BucketLayout mlp_layout(int partitions) {
  return zero::layout::BucketLayout({32 * 16, 32, 8 * 32, 8}, partitions, 8, 100, {3, 2, 1, 0});
}

}  // namespace engine_test
