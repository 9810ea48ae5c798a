// The GPT module against an independent computation of its loss straight from an llm.c
// checkpoint's flat weights, written differently on purpose (explicit formulas, loops over heads).
#include "models/gpt/gpt.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>

#include "models/gpt/gpt_flops.h"
#include "models/gpt/sampler.h"
#include "tests/gpt_reference.h"
#include "zero/error.h"
#include "zero/memory_tracker.h"

using namespace zero::gpt;
using zero::gpt::by_hand::reference_loss;

namespace {

const GptShape kShape{.max_seq = 8, .vocab = 11, .layers = 2, .heads = 2, .channels = 8, .padded_vocab = 16};

std::vector<float> random_params(const GptShape& s) {
  torch::manual_seed(9);
  at::Tensor t = torch::randn({checkpoint_numel(s)}) * 0.3;
  return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
}

}  // namespace

TEST(Gpt, LossMatchesAnIndependentComputationFromTheFile) {
  const std::vector<float> params = random_params(kShape);
  const std::string file = (std::filesystem::temp_directory_path() / "gpt_test_model.bin").string();
  write_llmc_checkpoint(file, kShape, params);
  Gpt model(kShape);
  load_llmc(model, read_llmc_checkpoint(file), file);
  torch::manual_seed(4);
  at::Tensor tokens = torch::randint(kShape.vocab, {3, kShape.max_seq}, torch::kLong);
  at::Tensor targets = torch::randint(kShape.vocab, {3, kShape.max_seq}, torch::kLong);
  const double ours = model.loss(tokens, targets).item<double>();
  const double reference = reference_loss(params, kShape, tokens, targets);
  EXPECT_NEAR(ours, reference, 1e-5 * reference);
  EXPECT_GT(reference, 0.5);  // random weights: a real, non-trivial loss
  // Export gives back the file's weights exactly.
  EXPECT_EQ(to_llmc_params(model), params);
  std::filesystem::remove(file);
}

TEST(Gpt, InitialisationFollowsLlmc) {
  torch::manual_seed(1);
  Gpt model(kShape);
  EXPECT_TRUE(model.blocks[0]->block->ln1w.equal(torch::ones({kShape.channels})));
  EXPECT_TRUE(model.blocks[1]->block->fcb.equal(torch::zeros({4 * kShape.channels})));
  GptShape big{.max_seq = 64, .vocab = 500, .layers = 8, .heads = 4, .channels = 64, .padded_vocab = 512};
  Gpt large(big);
  EXPECT_NEAR(large.wte.std().item<double>(), 0.02, 0.002);
  EXPECT_NEAR(large.blocks[0]->block->attprojw.std().item<double>(), 0.02 / std::sqrt(16.0), 0.0005);
  EXPECT_NEAR(large.blocks[0]->block->fcprojw.std().item<double>(), 0.02 / std::sqrt(16.0), 0.0005);
}

TEST(Gpt, ShapeMismatchNamesTheField) {
  GptShape other = kShape;
  other.layers = 3;
  LlmcCheckpoint checkpoint{other, std::vector<float>(static_cast<size_t>(checkpoint_numel(other)))};
  Gpt model(kShape);
  try {
    load_llmc(model, checkpoint, "model.bin");
    FAIL();
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.bin: header field L = 3 does not match the model's 2"),
              std::string::npos)
        << e.what();
  }
}

TEST(GptSampler, GreedyIsTheArgmaxAndTopKStaysInTheTopK) {
  torch::manual_seed(3);
  Gpt model(kShape);
  const std::vector<int64_t> prompt = {1, 2, 3};
  const std::vector<int64_t> greedy =
      generate(model, prompt, {.tokens = 12, .top_k = 0, .temperature = 1.0, .seed = 0});
  ASSERT_EQ(greedy.size(), 15u);  // maxT = 8: the context slides
  EXPECT_EQ(std::vector<int64_t>(greedy.begin(), greedy.begin() + 3), prompt);
  for (size_t i = 3; i < greedy.size(); ++i) {  // each new token is the argmax given the last maxT before it
    const size_t from = i > static_cast<size_t>(kShape.max_seq) ? i - kShape.max_seq : 0;
    at::Tensor context = torch::tensor(std::vector<int64_t>(greedy.begin() + from, greedy.begin() + i)).view({1, -1});
    EXPECT_EQ(model.forward(context)[0][-1].argmax().item<int64_t>(), greedy[i]) << i;
  }
  const SampleOptions top2{.tokens = 30, .top_k = 2, .temperature = 1.0, .seed = 5};
  const std::vector<int64_t> sampled = generate(model, prompt, top2);
  EXPECT_EQ(sampled, generate(model, prompt, top2)) << "the same seed draws the same tokens";
  bool differs_from_greedy = false;
  for (size_t i = 3; i < sampled.size(); ++i) {
    const size_t from = i > static_cast<size_t>(kShape.max_seq) ? i - kShape.max_seq : 0;
    at::Tensor context = torch::tensor(std::vector<int64_t>(sampled.begin() + from, sampled.begin() + i)).view({1, -1});
    at::Tensor top = std::get<1>(model.forward(context)[0][-1].topk(2));
    EXPECT_TRUE((top == sampled[i]).any().item<bool>()) << i;
    differs_from_greedy |= sampled[i] != top[0].item<int64_t>();
  }
  EXPECT_TRUE(differs_from_greedy) << "top-2 over 30 tokens never took the second choice";
}

// The activation formula by hand for one shape, and against the tracking allocator: what autograd
// keeps between forward and backward (measured as the live bytes after forward, the model and its
// gradients subtracted) is the formula's count within 5 %; with every block checkpointed, each
// block keeps its input only (within 10 %: the formula leaves out a few small tensors).
TEST(GptActivations, TheFormulaByHandAndAgainstTheTracker) {
  GptShape s{.max_seq = 64, .vocab = 256, .layers = 3, .heads = 2, .channels = 32};
  s.padded_vocab = 256;
  const int64_t tokens = 2 * 64;
  const int64_t block = 4 * tokens * (16 * 32 + 2 + 4), outside = 4 * tokens * (3 * 32 + 2) + 4 * 256 * 32;
  const int64_t working = 3 * 4 * 2 * 2 * 64 * 64;  // scores, probabilities, their gradient: one block of 64 queries
  const auto f = zero::gpt::gpt_activation_bytes(s, 2, 64, 1);
  EXPECT_EQ(f.backward_working_set, working);
  EXPECT_EQ(f.without_checkpointing, outside + 3 * block + working);
  EXPECT_EQ(f.with_checkpointing, outside + 3 * 4 * tokens * 32 + block + working);
  EXPECT_EQ(zero::gpt::gpt_activation_bytes(s, 2, 64, 2).with_checkpointing,
            outside + 2 * 4 * tokens * 32 + block + block + working);  // blocks 0 and 2 checkpointed, 1 not
  zero::MemoryTracker& tracker = zero::MemoryTracker::install();
  torch::manual_seed(1);
  Gpt model(s);
  const at::Tensor tokens_in = torch::randint(256, {2, 64}, torch::kLong);
  for (int64_t every : {int64_t{0}, int64_t{1}}) {
    model.checkpoint_every = every;
    const int64_t before = tracker.current();
    at::Tensor loss = model.loss(tokens_in, tokens_in);
    const int64_t kept = tracker.current() - before - static_cast<int64_t>(loss.nbytes());
    loss.backward();
    if (every == 0) {
      EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(f.without_checkpointing - working), 1.0, 0.05) << kept;
    } else {
      // Saved: each block's input and what lies outside the blocks (no block is recomputed yet).
      EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(outside + 3 * 4 * tokens * 32), 1.0, 0.10) << kept;
    }
  }
}

// The FLOPs the flops profiler counts, against PaLM's model-FLOPs formula (Chowdhery et al. 2022,
// appendix B): 6N + 12·L·C·T per token, N the matmul weights, counted here from the model's own
// parameters (2-D weights; the logits use wte's real rows, the position table is no matmul).
TEST(GptFlops, PerTokenIsPalmsSixNPlusTwelveLCT) {
  const zero::gpt::GptShape s{.max_seq = 64, .vocab = 300, .layers = 3, .heads = 4, .channels = 48, .padded_vocab = 320};
  torch::manual_seed(1);
  zero::gpt::Gpt model(s);
  double n = static_cast<double>(s.vocab) * s.channels;  // the tied output projection's real rows
  for (const auto& block : model.blocks)
    for (const auto& p : block->parameters())
      if (p.dim() == 2) n += static_cast<double>(p.numel());
  for (int64_t seq : {16, 64}) {
    const zero::gpt::GptFlops f = zero::gpt::gpt_flops_per_token(s, seq, 0);
    EXPECT_EQ(f.forward + f.backward, 6 * n + 12.0 * s.layers * s.channels * seq) << "T " << seq;
    EXPECT_EQ(f.backward, 2 * f.forward);
    EXPECT_EQ(f.recompute, 0);
    // Checkpointing blocks 0 and 2 of 3 runs their forward again.
    const zero::gpt::GptFlops c = zero::gpt::gpt_flops_per_token(s, seq, 2);
    EXPECT_EQ(c.recompute, 2 * (24.0 * s.channels * s.channels + 4.0 * s.channels * seq));
  }
}
