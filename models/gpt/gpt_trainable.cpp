#include "models/gpt/gpt_trainable.h"

#include <fmt/core.h>

#include <optional>

#include "models/gpt/gpt.h"
#include "models/gpt/gpt_flops.h"
#include "zero/zero.h"

namespace zero::gpt {
namespace {

class GptTrainable : public models::TrainableModel {
 public:
  explicit GptTrainable(const GptShape& shape) : model_(shape) {}
  Gpt& gpt() { return model_; }
  torch::nn::Module& module() override { return model_; }
  at::Tensor loss(const at::Tensor& x, const at::Tensor& y) override { return model_.loss(x, y); }
  at::Tensor loss_sum(const at::Tensor& x, const at::Tensor& y) override {
    const at::Tensor logits = model_.forward(x);
    return torch::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat), y.reshape(-1), {},
                                     at::Reduction::Sum, -100);
  }
  at::Tensor logits(const at::Tensor& tokens) override { return model_.forward(tokens); }
  int64_t vocab() const override { return model_.shape.vocab; }
  int64_t max_seq() const override { return model_.shape.max_seq; }
  int64_t hidden_size() const override { return model_.shape.channels; }
  int64_t parameters() const override { return checkpoint_numel(model_.shape); }
  std::string describe() const override {
    const GptShape& s = model_.shape;
    return fmt::format("GPT-2 L={} NH={} C={} V={} maxT={}", s.layers, s.heads, s.channels, s.vocab, s.max_seq);
  }
  void set_checkpoint_every(int64_t every) override { model_.checkpoint_every = every; }
  double flops_per_token(int64_t seq) const override {
    const GptFlops f = gpt_flops_per_token(model_.shape, seq, model_.checkpoint_every);
    return f.forward + f.backward;
  }
  std::optional<std::pair<int64_t, int64_t>> activation_bytes(int64_t rows, int64_t seq, int64_t every) const override {
    const ActivationBytes a = gpt_activation_bytes(model_.shape, rows, seq, every);
    return std::make_pair(a.without_checkpointing, a.with_checkpointing);
  }
  // The shape goes along so that `zero-ckpt consolidate --format llmc` can write llm.c's header.
  nlohmann::json client_state() const override {
    const GptShape& g = model_.shape;
    return {{"gpt",
             {{"max_seq", g.max_seq},
              {"vocab", g.vocab},
              {"layers", g.layers},
              {"heads", g.heads},
              {"channels", g.channels},
              {"padded_vocab", g.padded_vocab}}}};
  }
  void export_to(Engine& engine, World& world, const std::string& path) override {
    engine.gather_parameters();  // stage 3: the units' weights are shards until gathered
    if (world.rank() == 0) write_llmc_checkpoint(path, model_.shape, to_llmc_params(model_));
  }

 private:
  Gpt model_;
};

}  // namespace

std::unique_ptr<models::TrainableModel> make_gpt(const GptShape& shape, const LlmcCheckpoint* init,
                                                 const std::string& init_path, const Config& config, World& world,
                                                 bool partitioned_init) {
  // Stage 3 with random weights: built partitioned, never whole on a rank (zero::Init; a no-op
  // at other stages). Weights from an llm.c file are read into a whole model first.
  std::optional<Init> partitioned;
  if (!init && partitioned_init) partitioned.emplace(config, world);
  auto model = std::make_unique<GptTrainable>(shape);
  partitioned.reset();
  if (init) load_llmc(model->gpt(), *init, init_path);
  return model;
}

}  // namespace zero::gpt
