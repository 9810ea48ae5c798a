// The mixture-of-experts layer and the load-balancing loss (llama_moe.h).
#include "models/llama/llama_moe.h"

#include <torch/torch.h>

#include "zero/activation_checkpoint.h"
#include "zero/compute.h"

namespace zero::llama {

SparseMoeBlock::SparseMoeBlock(const LlamaConfig& c, WeightSource& source, const std::vector<HfTensor>& tensors,
                               int layer, at::ScalarType dtype, std::shared_ptr<RouterLogits> logits)
    : moe(c.moe), router_logits(std::move(logits)) {
  const std::string p = "model.layers." + std::to_string(layer) + "." + c.moe_prefix();
  // Registration order is transformers' (the engine lays buckets out from it).
  gate = register_module("gate", std::make_shared<Weights>(source, p + "gate.", tensors, dtype));
  expert_list = register_module("experts", std::make_shared<torch::nn::Module>());
  for (int64_t e = 0; e < moe.num_experts; ++e) {
    const std::string name = std::to_string(e);
    experts.push_back(expert_list->register_module(
        name, std::make_shared<LlamaMlp>(source, tensors, p + "experts." + name + ".", dtype, TensorParallelPlace{},
                                         c.expert_projections())));
  }
  tokens_per_expert = torch::zeros({moe.num_experts}, torch::kLong);
  if (moe.shared_expert_intermediate_size > 0) {
    shared_expert = register_module("shared_expert", std::make_shared<LlamaMlp>(source, tensors, p + "shared_expert.", dtype));
    shared_expert_gate =
        register_module("shared_expert_gate", std::make_shared<Weights>(source, p + "shared_expert_gate.", tensors, dtype));
  }
}

at::Tensor SparseMoeBlock::forward(const at::Tensor& h) {
  const int64_t hidden = h.size(-1), k = moe.experts_per_token;
  const at::Tensor x = h.reshape({-1, hidden});
  const at::Tensor logits = zero::linear(x, gate->weight, at::Tensor());
  // Once per forward: a checkpointed layer's recomputation in backward adds nothing.
  if (router_logits && !checkpointing::detail::recomputing()) router_logits->push_back(logits);
  auto [weights, chosen] = torch::softmax(logits, 1, at::kFloat).topk(k, -1);
  if (moe.normalize_top_k) weights = weights / weights.sum(-1, /*keepdim=*/true);
  weights = weights.to(x.scalar_type());
  // [experts, k, tokens]: which tokens chose each expert, and in which of their k places.
  const at::Tensor hits = torch::one_hot(chosen, moe.num_experts).permute({2, 1, 0});
  if (at::GradMode::is_enabled() && !checkpointing::detail::recomputing())
    tokens_per_expert += hits.sum({1, 2}).to(at::kCPU);
  at::Tensor out = torch::zeros_like(x);
  for (int64_t e = 0; e < moe.num_experts; ++e) {
    const at::Tensor where = hits[e].nonzero();  // (place, token) pairs, place-major as torch.where gives them
    const at::Tensor place = where.select(1, 0), token = where.select(1, 1);
    const at::Tensor y = experts[static_cast<size_t>(e)]->forward(x.index_select(0, token)) *
                         weights.index({token, place}).unsqueeze(-1);
    out.index_add_(0, token, y.to(x.scalar_type()));
  }
  if (shared_expert) {
    out = out + torch::sigmoid(zero::linear(x, shared_expert_gate->weight, at::Tensor())) * shared_expert->forward(x);
  }
  return out.view(h.sizes());
}

at::Tensor load_balancing_loss(const RouterLogits& router_logits, int64_t num_experts, int64_t experts_per_token) {
  const at::Tensor pooled = torch::cat(router_logits, 0);
  const at::Tensor probs = torch::softmax(pooled, -1);
  const at::Tensor chosen = std::get<1>(probs.topk(experts_per_token, -1));
  const at::Tensor share = torch::one_hot(chosen, num_experts).to(at::kFloat).mean(0);  // [k, experts]
  const at::Tensor mean_prob = probs.mean(0);                                             // [experts]
  return (share * mean_prob.unsqueeze(0)).sum() * static_cast<double>(num_experts);
}

}  // namespace zero::llama
