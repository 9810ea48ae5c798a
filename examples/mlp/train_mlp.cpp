// A complete zerocpp training program in one page: an MLP learns a fixed random function, with
// ZeRO configured by a DeepSpeed JSON file.
//
//   build/apps/zero-run -n 2 build/examples/mlp/train_mlp examples/mlp/ds_config.json
#include <torch/torch.h>

#include <cstdio>

#include "zero/zero.h"

// 1. The model: plain LibTorch. zerocpp needs nothing special from it.
struct Mlp : torch::nn::Module {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(32, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 8));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2(torch::gelu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

int main(int argc, char** argv) {
  const std::string config_path = argc > 1 ? argv[1] : "examples/mlp/ds_config.json";
  torch::set_num_threads(1);  // one thread per rank when ranks share a machine
  zero::keep_freed_memory();  // include/zero/allocator.h

  // 2. The world (rank, size) and the DeepSpeed config, resolved for this many ranks.
  zero::World world = zero::World::from_environment();
  zero::Config config = zero::Config::from_file(config_path, {.world_size = world.size()});

  // 3. The engine: partitions optimizer state (stage 1), gradients (stage 2) across ranks.
  torch::manual_seed(config.seed);
  auto model = std::make_shared<Mlp>();
  zero::Engine engine(*model, config, world);

  // 4. The loop. Every step sees the same global batch whatever the number of ranks; each rank
  //    takes its contiguous rows of each micro-batch.
  torch::manual_seed(7);
  const at::Tensor teacher = torch::randn({32, 8});
  const int64_t micro = config.train_micro_batch_size_per_gpu;
  for (int step = 0; step < 50; ++step) {
    torch::manual_seed(1000 + step);
    at::Tensor x = torch::randn({config.train_batch_size, 32});
    at::Tensor y = torch::tanh(x.matmul(teacher));
    double loss_sum = 0;
    for (int64_t m = 0; m < config.gradient_accumulation_steps; ++m) {
      const int64_t first = (m * world.size() + world.rank()) * micro;
      at::Tensor xs = x.narrow(0, first, micro), ys = y.narrow(0, first, micro);
      at::Tensor loss = engine.forward([&] { return torch::mse_loss(model->forward(xs), ys); });
      engine.backward(loss);
      engine.step();  // a no-op until the accumulation boundary
      loss_sum += loss.item<double>();
    }
    if (world.rank() == 0 && step % 5 == 0) {
      std::printf("step %3lld  loss %.6f  lr %.2e  grad norm %.4f\n", static_cast<long long>(engine.global_steps()),
                  loss_sum / static_cast<double>(config.gradient_accumulation_steps), engine.get_lr(),
                  engine.get_global_grad_norm());
    }
  }
  if (world.rank() == 0) {
    zero::MemoryReport m = engine.memory_report();
    std::printf(
        "rank 0 model state: %lld B (params %lld, grads %lld, fp32 master %lld, optimizer %lld, buckets %lld)\n",
        static_cast<long long>(m.total()), static_cast<long long>(m.parameters), static_cast<long long>(m.gradients),
        static_cast<long long>(m.master_weights), static_cast<long long>(m.optimizer_state),
        static_cast<long long>(m.buckets));
  }
  return 0;
}
