// The GPT module against an independent computation of its loss straight from an llm.c
// checkpoint's flat weights, written differently on purpose (explicit formulas, loops over heads).
#include "models/gpt/gpt.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>

#include "zero/error.h"

using namespace zero::gpt;

namespace {

const GptShape kShape{.max_seq = 8, .vocab = 11, .layers = 2, .heads = 2, .channels = 8, .padded_vocab = 16};

std::vector<float> random_params(const GptShape& s) {
  torch::manual_seed(9);
  at::Tensor t = torch::randn({checkpoint_numel(s)}) * 0.3;
  return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
}

// The loss of an llm.c model, from its flat weights, in plain tensor arithmetic.
double reference_loss(const std::vector<float>& params, const GptShape& s, const at::Tensor& tokens,
                      const at::Tensor& targets) {
  at::Tensor flat =
      torch::from_blob(const_cast<float*>(params.data()), {static_cast<int64_t>(params.size())}, torch::kFloat)
          .to(torch::kDouble);
  std::map<std::string, at::Tensor> w;
  for (const auto& spec : checkpoint_tensors(s))
    w[spec.name] = flat.narrow(0, spec.offset, spec.numel()).view(spec.shape);
  const int64_t B = tokens.size(0), T = tokens.size(1), C = s.channels, hs = C / s.heads;
  auto norm = [](const at::Tensor& x, const at::Tensor& g, const at::Tensor& b) {
    at::Tensor mean = x.mean(-1, true);
    at::Tensor var = ((x - mean) * (x - mean)).mean(-1, true);  // biased
    return (x - mean) / torch::sqrt(var + 1e-5) * g + b;
  };
  at::Tensor x = w["wte"].index_select(0, tokens.reshape(-1)).view({B, T, C}) + w["wpe"].narrow(0, 0, T);
  for (int64_t l = 0; l < s.layers; ++l) {
    at::Tensor h = norm(x, w["ln1w"][l], w["ln1b"][l]);
    at::Tensor qkv = h.matmul(w["qkvw"][l].t()) + w["qkvb"][l];
    at::Tensor attended = torch::zeros({B, T, C}, torch::kDouble);
    for (int64_t head = 0; head < s.heads; ++head) {
      at::Tensor q = qkv.narrow(2, head * hs, hs), k = qkv.narrow(2, C + head * hs, hs),
                 v = qkv.narrow(2, 2 * C + head * hs, hs);
      for (int64_t t = 0; t < T; ++t) {
        at::Tensor scores = (k.narrow(1, 0, t + 1) * q.narrow(1, t, 1)).sum(-1) / std::sqrt(double(hs));  // [B, t+1]
        at::Tensor weights = torch::exp(scores - std::get<0>(scores.max(1, true)));
        weights = weights / weights.sum(1, true);
        attended.narrow(1, t, 1)
            .narrow(2, head * hs, hs)
            .copy_((weights.unsqueeze(2) * v.narrow(1, 0, t + 1)).sum(1, true));
      }
    }
    x = x + attended.matmul(w["attprojw"][l].t()) + w["attprojb"][l];
    h = norm(x, w["ln2w"][l], w["ln2b"][l]);
    at::Tensor u = h.matmul(w["fcw"][l].t()) + w["fcb"][l];
    u = 0.5 * u * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
    x = x + u.matmul(w["fcprojw"][l].t()) + w["fcprojb"][l];
  }
  x = norm(x, w["lnfw"], w["lnfb"]);
  at::Tensor logits = x.matmul(w["wte"].narrow(0, 0, s.vocab).t()).view({B * T, s.vocab});
  at::Tensor top = std::get<0>(logits.max(1, true));
  at::Tensor log_sum_exp = top.squeeze(1) + torch::log(torch::exp(logits - top).sum(1));
  at::Tensor picked = logits.gather(1, targets.reshape({-1, 1})).squeeze(1);
  return (log_sum_exp - picked).mean().item<double>();
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
  EXPECT_TRUE(model.blocks[0]->ln1w.equal(torch::ones({kShape.channels})));
  EXPECT_TRUE(model.blocks[1]->fcb.equal(torch::zeros({4 * kShape.channels})));
  GptShape big{.max_seq = 64, .vocab = 500, .layers = 8, .heads = 4, .channels = 64, .padded_vocab = 512};
  Gpt large(big);
  EXPECT_NEAR(large.wte.std().item<double>(), 0.02, 0.002);
  EXPECT_NEAR(large.blocks[0]->attprojw.std().item<double>(), 0.02 / std::sqrt(16.0), 0.0005);
  EXPECT_NEAR(large.blocks[0]->fcprojw.std().item<double>(), 0.02 / std::sqrt(16.0), 0.0005);
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
