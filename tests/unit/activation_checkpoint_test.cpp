// checkpointing::checkpoint without an engine: the same gradients, bit for bit, as running the
// block plainly (dropout on: the random state is restored), with inputs that do or do not
// require grad, several outputs, frozen parameters; and the ways a recomputation can go wrong
// are errors, not wrong gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "zero/activation_checkpoint.h"
#include "zero/error.h"

namespace ckpt = zero::checkpointing;

namespace {

struct Block : torch::nn::Module {
  Block() {
    fc = register_module("fc", torch::nn::Linear(16, 32));
    out = register_module("out", torch::nn::Linear(32, 16));
  }
  at::Tensor forward(const at::Tensor& x) {
    return x + torch::dropout(out(torch::gelu(torch::dropout(fc(x), 0.2, is_training()))), 0.2, is_training());
  }
  torch::nn::Linear fc{nullptr}, out{nullptr};
};

// Loss and gradients (parameters, then the input when it requires grad) of two blocks in a row.
std::vector<at::Tensor> grads_of(bool checkpointed, bool input_grad) {
  torch::manual_seed(3);
  auto a = std::make_shared<Block>(), b = std::make_shared<Block>();
  at::Tensor x = torch::randn({4, 16}).requires_grad_(input_grad);
  torch::manual_seed(99);  // the dropout masks' stream
  auto run = [&](const std::shared_ptr<Block>& m, const at::Tensor& in) {
    return checkpointed ? ckpt::checkpoint([m](const at::Tensor& t) { return m->forward(t); }, in) : m->forward(in);
  };
  at::Tensor loss = run(b, run(a, x)).pow(2).sum();
  loss.backward();
  std::vector<at::Tensor> out = {loss.detach()};
  for (const auto& p : a->parameters()) out.push_back(p.grad());
  for (const auto& p : b->parameters()) out.push_back(p.grad());
  if (input_grad) out.push_back(x.grad());
  out.push_back(torch::rand({1}));  // where the random stream is after the step
  return out;
}

TEST(ActivationCheckpoint, TheSameGradientsBitForBitWithDropout) {
  for (bool input_grad : {false, true}) {
    const auto before = ckpt::counts();
    const auto plain = grads_of(false, input_grad), checkpointed = grads_of(true, input_grad);
    ASSERT_EQ(plain.size(), checkpointed.size());
    for (size_t i = 0; i < plain.size(); ++i)
      EXPECT_TRUE(plain[i].equal(checkpointed[i])) << "tensor " << i << (input_grad ? " (input requires grad)" : "");
    const auto after = ckpt::counts();
    EXPECT_EQ(after.forwards - before.forwards, 2);
    EXPECT_EQ(after.recomputations - before.recomputations, 2);
  }
}

TEST(ActivationCheckpoint, TheProfileTimesForwardRecomputationAndBackward) {
  ckpt::reset_profile();
  ckpt::set_profiling(true);
  grads_of(true, true);  // two blocks, both named "checkpoint"
  ckpt::set_profiling(false);
  const auto entries = ckpt::profile();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].name, "checkpoint");
  EXPECT_EQ(entries[0].calls, 2);
  EXPECT_GT(entries[0].forward_seconds, 0);
  EXPECT_GT(entries[0].recompute_seconds, 0);
  EXPECT_GT(entries[0].backward_seconds, 0);
  grads_of(true, true);  // profiling off: nothing more
  EXPECT_EQ(ckpt::profile()[0].calls, 2);
}

TEST(ActivationCheckpoint, SeveralOutputsAndFrozenParameters) {
  torch::manual_seed(5);
  torch::nn::Linear frozen(8, 8), trained(8, 8);
  frozen->weight.requires_grad_(false);
  frozen->bias.requires_grad_(false);
  const at::Tensor x = torch::randn({3, 8});
  auto fn = [frozen, trained](const std::vector<at::Tensor>& in) mutable {
    at::Tensor h = frozen(in[0]);
    return std::vector<at::Tensor>{torch::tanh(trained(h)), h * 2, in[0].argmax(1)};
  };
  auto loss_of = [&](const std::vector<at::Tensor>& outs) { return outs[0].sum() + outs[1].pow(2).sum(); };
  loss_of(fn({x})).backward();
  const at::Tensor expected = trained->weight.grad().clone();
  trained->zero_grad();
  const auto outs = ckpt::checkpoint(fn, {x});
  EXPECT_EQ(outs[2].scalar_type(), torch::kLong);
  EXPECT_TRUE(outs[0].requires_grad());
  EXPECT_FALSE(outs[2].requires_grad()) << "an integer output got a gradient edge";
  loss_of(outs).backward();
  EXPECT_TRUE(trained->weight.grad().equal(expected));
  EXPECT_FALSE(frozen->weight.grad().defined()) << "a frozen parameter got a gradient";
}

// What went wrong, from a backward that should fail.
std::string error_of_backward(const at::Tensor& loss) {
  try {
    loss.backward();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST(ActivationCheckpoint, AForwardThatChangesIsDetected) {
  // Dropout drawn from a generator of its own: not the CPU default one that checkpoint restores.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  torch::nn::Linear lin(8, 8);
  auto fn = [lin, gen](const at::Tensor& t) mutable { return lin(t) * (at::rand({8}, gen) > 0.5).to(torch::kFloat); };
  const at::Tensor loss = ckpt::checkpoint(fn, torch::randn({2, 8}), "h7").sum();
  const std::string what = error_of_backward(loss);
  EXPECT_NE(what.find("activation checkpoint \"h7\""), std::string::npos) << what;
  EXPECT_NE(what.find("differs"), std::string::npos) << what;
}

TEST(ActivationCheckpoint, AnInputChangedInPlaceIsAnError) {
  torch::nn::Linear lin(8, 8);
  at::Tensor x = torch::randn({2, 8});
  const at::Tensor loss = ckpt::checkpoint([lin](const at::Tensor& t) mutable { return lin(t); }, x, "h1").sum();
  x.add_(1);
  const std::string what = error_of_backward(loss);
  EXPECT_NE(what.find("changed in place"), std::string::npos) << what;
}

TEST(ActivationCheckpoint, UnderNoGradItIsAPlainCall) {
  torch::nn::Linear lin(8, 8);
  const auto before = ckpt::counts();
  at::NoGradGuard no_grad;
  const at::Tensor y = ckpt::checkpoint([lin](const at::Tensor& t) mutable { return lin(t); }, torch::randn({2, 8}));
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_EQ(ckpt::counts().forwards, before.forwards);
}

}  // namespace
