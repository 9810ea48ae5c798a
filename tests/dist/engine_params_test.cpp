// Parameter arrangements the engine must handle: a parameter tied into two modules (and used twice
// in the graph), frozen parameters, and parameters that never get a gradient.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist_test_world.h"
#include "zero/engine.h"
#include "zero/error.h"

namespace {

struct Quirky : torch::nn::Module {
  Quirky() {
    embed = register_module("embed", torch::nn::Linear(torch::nn::LinearOptions(8, 16).bias(false)));
    frozen = register_module("frozen", torch::nn::Linear(16, 16));
    unused = register_module("unused", torch::nn::Linear(16, 16));
    head = register_module("head", torch::nn::Linear(16, 4));
    tied = register_parameter("tied", torch::randn({16, 16}) * 0.1);
    alias = register_module("alias", std::make_shared<torch::nn::Module>());
    alias->register_parameter("tied_again", tied);  // the same tensor under a second name
    frozen->weight.set_requires_grad(false);
    frozen->bias.set_requires_grad(false);
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = torch::tanh(frozen(torch::tanh(embed(x))));
    h = torch::tanh(h.matmul(tied) + h.matmul(tied.t()));  // the tied weight, used twice
    return head(h);
  }
  torch::nn::Linear embed{nullptr}, frozen{nullptr}, unused{nullptr}, head{nullptr};
  std::shared_ptr<torch::nn::Module> alias;
  at::Tensor tied;
};

// Biases and the never-used layer's weight decay-free; the rest at the config's 0.01.
std::vector<zero::ParamGroup> no_decay_groups(Quirky& model) {
  return {{{model.head->bias, model.unused->bias, model.unused->weight}, 0.0}};
}

std::vector<at::Tensor> train(int stage, zero::World& world, std::vector<at::Tensor>* frozen_before = nullptr,
                              bool groups = false) {
  torch::manual_seed(3);
  auto model = std::make_shared<Quirky>();
  if (frozen_before) *frozen_before = {model->frozen->weight.clone(), model->frozen->bias.clone()};
  zero::Config config = zero::Config::parse(R"({"train_batch_size": 24, "gradient_clipping": 1.0,
      "zero_optimization": {"stage": )" + std::to_string(stage) +
                                            R"(, "reduce_bucket_size": 64},
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}}})");
  config.resolve({.world_size = world.size()});
  zero::Engine engine(*model, config, world, groups ? no_decay_groups(*model) : std::vector<zero::ParamGroup>{});
  const int64_t micro = config.train_micro_batch_size_per_gpu;
  for (int step = 0; step < 10; ++step) {
    torch::manual_seed(50 + step);
    at::Tensor x = torch::randn({24, 8}), y = torch::randn({24, 4});
    at::Tensor xs = x.narrow(0, world.rank() * micro, micro), ys = y.narrow(0, world.rank() * micro, micro);
    engine.backward(engine.forward([&] { return torch::mse_loss(model->forward(xs), ys); }));
    engine.step();
  }
  std::vector<at::Tensor> weights;
  for (const auto& p : model->parameters()) weights.push_back(p.detach().clone());
  return weights;
}

}  // namespace

TEST(EngineParams, TiedFrozenAndUnusedParametersTrainLikeOneProcess) {
  zero::World single = zero::World::single_process();
  std::vector<at::Tensor> frozen_before;
  const std::vector<at::Tensor> ref = train(0, single, &frozen_before);
  for (int stage : {1, 2}) {
    std::vector<at::Tensor> got = train(stage, test_world());
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      const double scale = ref[i].abs().max().item<double>();
      EXPECT_LE((got[i] - ref[i]).abs().max().item<double>(), 1e-5 * scale) << "stage " << stage << " parameter " << i;
    }
  }
  torch::manual_seed(3);
  Quirky fresh;
  auto names = fresh.named_parameters();
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i].key();
    if (name.rfind("frozen.", 0) == 0) {
      EXPECT_TRUE(ref[i].equal(names[i].value())) << name << " is frozen and must not move";
    } else if (name != "alias.tied_again") {
      EXPECT_FALSE(ref[i].equal(names[i].value())) << name << " should have trained";
    }
  }
  // The tied tensor is one parameter: both names still see the same values.
  auto index_of = [&](const std::string& name) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i].key() == name) return i;
    }
    ADD_FAILURE() << "no parameter " << name;
    return size_t{0};
  };
  EXPECT_TRUE(ref[index_of("tied")].equal(ref[index_of("alias.tied_again")]));
}

TEST(EngineParams, ParameterGroupsSetWeightDecayPerParameter) {
  zero::World single = zero::World::single_process();
  const std::vector<at::Tensor> ref = train(0, single, nullptr, /*groups=*/true);
  for (int stage : {1, 2}) {
    std::vector<at::Tensor> got = train(stage, test_world(), nullptr, /*groups=*/true);
    for (size_t i = 0; i < ref.size(); ++i) {
      const double scale = ref[i].abs().max().item<double>();
      EXPECT_LE((got[i] - ref[i]).abs().max().item<double>(), 1e-5 * scale) << "stage " << stage << " parameter " << i;
    }
  }
  // unused.weight gets no gradient and no decay: it must not move. Without groups it decays.
  torch::manual_seed(3);
  Quirky fresh;
  const std::vector<at::Tensor> plain = train(0, single);
  auto names = fresh.named_parameters();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].key() == "unused.weight") {
      EXPECT_TRUE(ref[i].equal(names[i].value())) << "no gradient and no decay: unchanged";
      EXPECT_FALSE(plain[i].equal(names[i].value())) << "the default group decays it";
    }
  }
  // A tensor in two groups is an error.
  torch::manual_seed(3);
  auto model = std::make_shared<Quirky>();
  zero::Config config = zero::Config::parse(R"({"train_batch_size": 24, "optimizer": {"type": "AdamW"}})");
  config.resolve({.world_size = test_world().size()});
  const std::vector<zero::ParamGroup> twice = {{{model->head->bias}, 0.0}, {{model->head->bias}, 0.1}};
  EXPECT_THROW(zero::Engine(*model, config, test_world(), twice), zero::Error);
}
