#include "models/llama/llama_trainable.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>

#include "models/llama/llama_moe.h"
#include "models/llama/lora.h"
#include "models/llama/llama_tensor_parallel.h"
#include "zero/comm_stats.h"
#include "zero/tensor_parallel.h"
#include "zero/zero.h"

namespace zero::llama {
namespace {

// Expert parallelism's groups over the engine's world (docs/moe.md): expert-parallel groups of
// consecutive ranks — the ones that exchange tokens every layer, so within a host where the hosts
// allow — and expert-data-parallel groups strided across them (rank r's holds the ranks with r's
// place in its expert-parallel group: the same experts), as DeepSpeed's MoE groups are cut.
struct ExpertGroups {
  ExpertGroups(World& world, int size)
      : expert_parallel(world.split(world.rank() / size)), expert_data_parallel(world.split(world.rank() % size)) {}
  World expert_parallel, expert_data_parallel;
  // The layers' exchange goes through this, so that it is counted (comms logger, zero-train's report).
  std::shared_ptr<CommStats> stats = std::make_shared<CommStats>();
  CountingCommunicator exchange{expert_parallel.communicator(), stats};
};

bool is_expert_parameter(const std::string& name) { return name.find(".experts.") != std::string::npos; }

class LlamaTrainable : public models::TrainableModel {
 public:
  LlamaTrainable(const HfModel& hf, WeightSource& weights, at::ScalarType dtype, LlamaExportOptions options,
                 ParallelGrid* grid, bool sequence_parallel, const std::vector<int>& stage_bounds,
                 std::unique_ptr<ExpertGroups> experts, const LoraOptions& lora)
      : experts_(std::move(experts)),
        model_(hf.config, weights, dtype, place_in(grid, sequence_parallel), stage_in(grid, stage_bounds),
               expert_place(experts_.get())),
        stage_bounds_(stage_bounds),
        grid_(grid),
        dtype_(dtype),
        config_json_(hf.config_json),
        source_dir_(hf.dir),
        options_(options),
        tensor_parallel_(grid ? &grid->tensor_parallel() : nullptr),
        layer_stats_(grid ? &grid->layer_stats() : nullptr) {
    if (lora.enabled) lora_ = attach_lora(model_, lora);
    merge_adapter_ = lora.merge_adapter;
  }
  torch::nn::Module& module() override { return model_; }
  at::Tensor loss(const at::Tensor& x, const at::Tensor& y) override { return model_.loss(x, y); }
  at::Tensor loss_sum(const at::Tensor& x, const at::Tensor& y) override { return model_.loss_sum(x, y); }
  at::Tensor logits(const at::Tensor& tokens) override { return model_.forward(tokens); }
  int64_t vocab() const override { return model_.config.vocab_size; }
  int64_t max_seq() const override { return model_.config.max_position_embeddings; }
  int64_t hidden_size() const override { return model_.config.hidden_size; }
  int64_t parameters() const override { return llama_parameter_count(model_.config); }
  std::string describe() const override {
    const LlamaConfig& c = model_.config;
    const MoeConfig& m = c.moe;
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) moe_layers += c.is_moe_layer(l) ? 1 : 0;
    const std::string experts =
        m.num_experts == 0
            ? ""
            : fmt::format(" experts={} top-{}{} expert_intermediate={}{} (in {} of the layers){}", m.num_experts,
                          m.experts_per_token, m.normalize_top_k ? " renormalised" : "", m.expert_intermediate_size,
                          m.shared_expert_intermediate_size > 0
                              ? fmt::format(" shared_expert={}", m.shared_expert_intermediate_size)
                              : "",
                          moe_layers, m.output_router_logits ? fmt::format(" aux_loss={}", m.router_aux_loss_coef) : "");
    std::string adapter;
    if (lora_) {
      int64_t trainable = 0;
      for (const auto& p : const_cast<LlamaForCausalLM&>(model_).parameters()) trainable += p.requires_grad() ? p.numel() : 0;
      adapter = fmt::format(" + LoRA r={} alpha={}{} on {} ({} trainable parameters)", lora_->r, lora_->alpha,
                            lora_->use_rslora ? " rsLoRA" : "", lora_->target_modules.dump(), trainable);
    }
    return fmt::format("{} ({}) layers={} hidden={} heads={} kv_heads={} head_dim={} intermediate={} vocab={}{}{}{}",
                       c.architecture, source_dir_, c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
                       c.num_key_value_heads, c.head_dim, c.intermediate_size, c.vocab_size,
                       c.tie_word_embeddings ? " tied" : "", experts, adapter);
  }
  void set_checkpoint_every(int64_t every) override { model_.checkpoint_every = every; }
  void set_partition_activations(bool partition) override { model_.partition_activations = partition; }
  at::Tensor stage_forward(const at::Tensor& tokens, const at::Tensor& targets, const at::Tensor& received,
                           LossReduction reduction) override {
    return model_.stage_forward(tokens, targets, received, reduction == LossReduction::kMean);
  }
  std::vector<int64_t> stage_activation_shape(int64_t rows, int64_t seq) const override {
    const TensorParallelPlace& tp = model_.place;
    return {rows, tp.sequence_parallel && tp.size > 1 ? seq / tp.size : seq, model_.config.hidden_size};
  }
  at::ScalarType stage_activation_dtype() const override { return dtype_; }  // the residual stream's
  at::Tensor tied_weight() override {
    if (!model_.config.tie_word_embeddings || model_.stage.stages == 1) return {};
    if (model_.stage.first()) return model_.model->embed_tokens->weight;
    return model_.tied_copy ? model_.tied_copy->weight : at::Tensor();
  }
  std::string describe_stages() const override { return describe_pipeline_stages(model_.config, stage_bounds_); }
  std::vector<ExpertLoad> tokens_per_expert() const override {
    std::vector<ExpertLoad> out;
    int64_t layer = model_.stage.first_layer;
    for (const auto& unit : model_.model->layers) {
      const auto& moe = unit->block->moe;
      if (moe) {
        const at::Tensor counts = moe->tokens_per_expert.contiguous();
        out.push_back({layer, std::vector<int64_t>(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel())});
      }
      ++layer;
    }
    return out;
  }
  double flops_per_token(int64_t seq) const override { return llama_flops_per_token(model_.config, seq); }
  std::optional<std::pair<int64_t, int64_t>> activation_bytes(int64_t, int64_t, int64_t) const override {
    return std::nullopt;
  }
  // config.json goes along so that `zero-ckpt consolidate --format hf` can write the directory.
  nlohmann::json client_state() const override {
    nlohmann::json state = {{"llama", {{"config", nlohmann::json::parse(config_json_.dump())}, {"source_dir", source_dir_}}}};
    if (lora_) {  // what the checkpoint's trainable parameters are: an adapter's
      state["llama"]["lora"] = {{"r", lora_->r}, {"lora_alpha", lora_->alpha}, {"lora_dropout", lora_->dropout},
                                {"target_modules", lora_->target_modules}, {"use_rslora", lora_->use_rslora},
                                {"modules_to_save", lora_->modules_to_save}};
    }
    return state;
  }
  ModelParallelOptions model_parallel() const override {
    return {.group = tensor_parallel_,
            .split_dim = [](const std::string& name) { return split_dim(split_of(name)); },
            .layer_stats = layer_stats_,
            .pipeline = grid_ && grid_->stages() > 1 ? &grid_->pipeline() : nullptr,
            .expert_parallel = experts_ ? &experts_->expert_parallel : nullptr,
            .expert_data_parallel = experts_ ? &experts_->expert_data_parallel : nullptr,
            .is_expert = is_expert_parameter,
            .expert_stats = experts_ ? experts_->stats.get() : nullptr,
            .expert_step = tokens_per_expert().empty() ? std::function<ExpertStep()>()
                                                       : [this] { return expert_step_since_last(); }};
  }
  void export_final(Engine& engine, World& world, const std::string& path) override {
    if (lora_ && merge_adapter_) return write_merged_model(engine, *lora_, source_dir_, path, world);
    export_to(engine, world, path);
  }
  void export_to(Engine& engine, World& world, const std::string& path) override {
    if (lora_) return write_peft_adapter(engine, *lora_, source_dir_, path, world);
    write_hf_model(engine, model_, config_json_,
                   {.out_dir = path,
                    .source_dir = source_dir_,
                    .max_shard_bytes = options_.max_shard_bytes,
                    .pipeline = grid_ && grid_->stages() > 1 ? &grid_->pipeline() : nullptr},
                   world);
  }

 private:
  std::unique_ptr<ExpertGroups> experts_;  // null without expert parallelism; before the model, which uses it
  LlamaForCausalLM model_;
  std::vector<int> stage_bounds_;  // pipeline_stages.h's bounds over the layer list (empty: one stage)
  ParallelGrid* grid_;
  at::ScalarType dtype_;
  nlohmann::ordered_json config_json_;
  std::string source_dir_;
  LlamaExportOptions options_;
  std::optional<LoraSpec> lora_;  // the adapters on the frozen base, when training LoRA
  bool merge_adapter_ = false;
  World* tensor_parallel_;
  CommStats* layer_stats_;
  mutable ExpertStep reported_;  // the MoE layers' totals at the last expert_step_since_last()

  // ModelParallelOptions::expert_step: what the MoE layers did since the last call.
  ExpertStep expert_step_since_last() const {
    ExpertStep now;
    for (const ExpertLoad& layer : tokens_per_expert()) now.load.push_back({layer.layer, layer.tokens});
    for (const auto& unit : model_.model->layers) {
      if (const auto& moe = unit->block->moe) {
        now.router += moe->seconds.router;
        now.dispatch += moe->seconds.dispatch;
        now.experts += moe->seconds.experts;
        now.combine += moe->seconds.combine;
      }
    }
    ExpertStep step = now;
    if (!reported_.load.empty()) {
      step.router -= reported_.router;
      step.dispatch -= reported_.dispatch;
      step.experts -= reported_.experts;
      step.combine -= reported_.combine;
      for (size_t l = 0; l < step.load.size(); ++l)
        for (size_t e = 0; e < step.load[l].tokens.size(); ++e) step.load[l].tokens[e] -= reported_.load[l].tokens[e];
    }
    reported_ = std::move(now);
    return step;
  }

  // Items [bounds[s], bounds[s + 1]) of (embedding, layers 0..L-1, head) are stage s's.
  static PipelinePlace stage_in(ParallelGrid* grid, const std::vector<int>& bounds) {
    if (!grid || grid->stages() == 1) return {};
    const int s = grid->stage(), layers = bounds.back() - 2;
    return {.stage = s,
            .stages = grid->stages(),
            .first_layer = std::clamp(bounds[static_cast<size_t>(s)] - 1, 0, layers),
            .end_layer = std::clamp(bounds[static_cast<size_t>(s) + 1] - 1, 0, layers)};
  }

  static ExpertPlace expert_place(ExpertGroups* experts) {
    if (!experts) return {};
    World& group = experts->expert_parallel;
    return {.group = &experts->exchange, .rank = group.rank(), .size = group.size()};
  }

  static TensorParallelPlace place_in(ParallelGrid* grid, bool sequence_parallel) {
    if (!grid) return {};
    World& group = grid->tensor_parallel();
    return {.group = &grid->layer_communicator(),
            .rank = group.rank(),
            .size = group.size(),
            .sequence_parallel = sequence_parallel};
  }
};

}  // namespace

std::vector<pipeline::Item> pipeline_items(const LlamaConfig& c) {
  const std::string family = c.architecture.substr(0, c.architecture.find("ForCausalLM"));
  std::vector<pipeline::Item> items{{"Embedding", c.vocab_size * c.hidden_size, false}};
  std::vector<int64_t> per_layer(static_cast<size_t>(c.num_hidden_layers), 0);
  for (const HfTensor& t : llama_tensors(c)) {
    if (t.layer >= 0) per_layer[static_cast<size_t>(t.layer)] += c10::multiply_integers(t.shape);
  }
  for (int64_t n : per_layer) items.push_back({family + "DecoderLayer", n, true});
  items.push_back({"LMHead", c.hidden_size + c.vocab_size * c.hidden_size, false});  // the final norm, lm_head (or its tied copy)
  return items;
}

std::string describe_pipeline_stages(const LlamaConfig& c, const std::vector<int>& bounds) {
  if (bounds.size() < 3) return "";
  const std::vector<pipeline::Item> items = pipeline_items(c);
  std::string out;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    const int begin = bounds[s], end = bounds[s + 1];
    int64_t parameters = 0;
    for (int i = begin; i < end; ++i) parameters += items[static_cast<size_t>(i)].parameters;
    std::vector<std::string> parts;
    if (begin == 0) parts.push_back("embedding");
    const int first = std::max(begin, 1) - 1, last = std::min(end, static_cast<int>(items.size()) - 1) - 1;
    if (last > first) parts.push_back(last - first == 1 ? fmt::format("layer {}", first)
                                                        : fmt::format("layers {}-{}", first, last - 1));
    if (end == static_cast<int>(items.size())) parts.push_back("norm and lm_head");
    out += fmt::format("{}stage {}: {} ({} parameters)", out.empty() ? "" : "; ", s, fmt::join(parts, ", "), parameters);
  }
  return out;
}

at::ScalarType llama_training_dtype(const Config& config) {
  return config.bf16 ? at::kBFloat16 : config.fp16.enabled ? at::kHalf : at::kFloat;
}

double llama_flops_per_token(const LlamaConfig& c, int64_t seq) {
  const double H = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
  const double attention_weights = H * static_cast<double>(c.q_size()) * 2 + H * static_cast<double>(c.kv_size()) * 2;
  // The weights a token multiplies: a dense layer's MLP, or a MoE layer's router, its k experts
  // and the shared expert (the model's active parameters, not all of them).
  const MoeConfig& m = c.moe;
  const double moe_weights = H * static_cast<double>(m.num_experts) +
                             3 * H * static_cast<double>(m.experts_per_token * m.expert_intermediate_size) +
                             (m.shared_expert_intermediate_size > 0
                                  ? 3 * H * static_cast<double>(m.shared_expert_intermediate_size) + H
                                  : 0.0);
  double matmul_weights = H * static_cast<double>(c.vocab_size);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    matmul_weights += attention_weights + (c.is_moe_layer(l) ? moe_weights : 3 * H * I);
  const double attention = 4.0 * static_cast<double>(seq) * static_cast<double>(c.q_size()) *
                           static_cast<double>(c.num_hidden_layers);
  const double forward = 2 * matmul_weights + attention;
  return 3 * forward;
}

void check_expert_parallel_config(const ExpertParallelConfig& ep, const LlamaConfig& model) {
  if (!ep.enabled) return;
  const MoeConfig& moe = model.moe;
  if (moe.num_experts == 0)
    throw Error(fmt::format("expert_parallel.enabled: {} has no experts", model.architecture), "expert_parallel.enabled");
  const bool qwen = model.family == Family::kQwen2Moe;
  if (!ep.preset_model.empty() && ep.preset_model != (qwen ? "qwen2_moe" : "mixtral") &&
      !(qwen && ep.preset_model == "qwen3_moe")) {
    throw Error(fmt::format("expert_parallel.preset_model is \"{}\" but the model's config.json says model_type \"{}\"",
                            ep.preset_model, model.model_type),
                "expert_parallel.preset_model");
  }
  if (ep.size <= 1) return;  // every expert on every rank: nothing to split (as DeepSpeed, which warns)
  if (moe.num_experts % ep.size != 0) {
    throw Error(fmt::format("{}: {} experts do not split evenly over {} ranks", ep.key, moe.num_experts, ep.size), ep.key);
  }
}

std::unique_ptr<models::TrainableModel> make_llama(const HfModel& hf, const Config& config, World& world,
                                                   const LlamaExportOptions& export_options, bool partitioned,
                                                   ParallelGrid* grid, const LoraOptions& lora) {
  // Stage 3: every rank reads every layer from the mapped files and keeps its shard (zero::Init),
  // so no rank holds more than one layer whole; at stages 0-2 Init does nothing and every rank
  // holds the weights, as DeepSpeed does.
  check_expert_parallel_config(config.expert_parallel, hf.config);
  const auto weights = file_weights(hf);
  if (grid) check_tensor_parallel_config(config.tensor_parallel, hf.config);
  std::vector<int> bounds;
  if (grid && grid->stages() > 1) {
    bounds = pipeline::partition_stages(pipeline_items(hf.config), grid->stages(), config.pipeline.partition_method);
  }
  std::unique_ptr<ExpertGroups> experts;
  if (config.expert_parallel.enabled && config.expert_parallel.size > 1) {
    if (grid) {
      throw Error(fmt::format("{} {} with tensor or pipeline parallelism is not built yet", config.expert_parallel.key,
                              config.expert_parallel.size),
                  config.expert_parallel.key);
    }
    experts = std::make_unique<ExpertGroups>(world, config.expert_parallel.size);
    // The engine partitions the experts over their own group when it takes the model: each rank
    // builds only its experts, whole (1/EP of them), and no layer is partitioned as it is built.
    partitioned = false;
  }
  // With LoRA the base is frozen, and the engine partitions only what trains: the model is built
  // whole, the adapters are added, then the engine takes the adapters (and the modules to save).
  if (lora.enabled) partitioned = false;
  std::optional<Init> scope;
  if (partitioned) scope.emplace(config, world);
  return std::make_unique<LlamaTrainable>(hf, *weights, llama_training_dtype(config), export_options, grid,
                                          config.tensor_parallel.sequence_parallel, bounds, std::move(experts), lora);
}

}  // namespace zero::llama
