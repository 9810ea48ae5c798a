// What zero-train's loop (models/common/trainer.h) needs of a model, so that one loop — data,
// schedule, logging, evaluation, checkpoints, export — trains every model family: the GPT of
// llm.c's files and the Llama family of Hugging Face's.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "zero/engine.h"

namespace torch::nn {
class Module;
}

namespace zero {
class Engine;
class World;
}  // namespace zero

namespace zero::models {

class TrainableModel {
 public:
  virtual ~TrainableModel() = default;
  virtual torch::nn::Module& module() = 0;
  // Mean cross-entropy of next-token prediction over all positions.
  virtual at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets) = 0;
  // Summed cross-entropy of the targets that are not -100 (PyTorch's ignore_index), in fp32: the
  // supervised fine-tuning loss before it is averaged over a step's learned tokens.
  virtual at::Tensor loss_sum(const at::Tensor& tokens, const at::Tensor& targets) = 0;
  // Logits [B, T, V] (for sampling).
  virtual at::Tensor logits(const at::Tensor& tokens) = 0;
  virtual int64_t vocab() const = 0;
  virtual int64_t max_seq() const = 0;
  virtual int64_t hidden_size() const = 0;  // for the config's "auto" values
  virtual int64_t parameters() const = 0;
  virtual std::string describe() const = 0;  // "GPT-2 L=4 NH=4 C=128 V=256 maxT=128"
  virtual void set_checkpoint_every(int64_t every) = 0;
  // activation_checkpointing.partition_activations: the checkpointed inputs kept split over the
  // model's tensor-parallel group. A model without one has nothing to split.
  virtual void set_partition_activations(bool partition) {}
  // Pipeline parallelism (zero/pipeline.h), for a model built as the grid's stage: a micro-batch
  // through this stage (from the tokens on the first, from `received` on the others; the loss on
  // the last), what passes between stages, the tied weight the schedule keeps alike on the first
  // and last stages (undefined: none), and which layers each stage holds ("" with one stage).
  // Only models that build stages override them. The last stage's loss is the mean over the
  // micro-batch's targets (as loss()) or their sum (as loss_sum()).
  enum class LossReduction { kMean, kSum };
  virtual at::Tensor stage_forward(const at::Tensor& tokens, const at::Tensor& targets, const at::Tensor& received,
                                   LossReduction reduction) {
    return {};
  }
  virtual std::vector<int64_t> stage_activation_shape(int64_t rows, int64_t seq) const { return {}; }
  virtual at::ScalarType stage_activation_dtype() const { return at::kFloat; }
  virtual at::Tensor tied_weight() { return {}; }
  virtual std::string describe_stages() const { return ""; }
  // Mixtures of experts: per MoE layer (in order), the tokens each expert got in this rank's
  // training forwards so far. Empty without experts.
  struct ExpertLoad {
    int64_t layer = 0;                // the decoder layer
    std::vector<int64_t> tokens;      // per expert
  };
  virtual std::vector<ExpertLoad> tokens_per_expert() const { return {}; }
  // Model FLOPs per token (forward + backward) at rows of `seq` tokens.
  virtual double flops_per_token(int64_t seq) const = 0;
  // The activations of one micro-step, without and with checkpointing, when the model knows them.
  virtual std::optional<std::pair<int64_t, int64_t>> activation_bytes(int64_t rows, int64_t seq,
                                                                       int64_t checkpoint_every) const = 0;
  // Saved with every checkpoint (client state), so tools can rebuild the model's files from it.
  virtual nlohmann::json client_state() const = 0;
  // Collective: writes the trained weights to `path` in the model's own format.
  virtual void export_to(Engine& engine, World& world, const std::string& path) = 0;
  // Collective: the run's final export, export_to's unless the model adds to it (a LoRA run with
  // --merge_adapter also merges the adapter into the base there).
  virtual void export_final(Engine& engine, World& world, const std::string& path) { export_to(engine, world, path); }
  // What the engine needs to know of the model's tensor-parallel split and pipeline stage (none by default).
  virtual ModelParallelOptions model_parallel() const { return {}; }
};

}  // namespace zero::models
