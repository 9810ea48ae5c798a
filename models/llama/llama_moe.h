// The mixture-of-experts layer of Mixtral and Qwen2-MoE (transformers' MixtralSparseMoeBlock and
// Qwen2MoeSparseMoeBlock, in eager mode), and the load-balancing loss (load_balancing_loss_func):
//   logits = gate(x)                                   [tokens, experts], the activations' dtype
//   weights, chosen = topk(softmax(logits in fp32), k)  renormalised over the k (Mixtral; Qwen2-MoE
//                                                       when norm_topk_prob), cast to x's dtype
//   out = Σ over the k: weight · expert_chosen(x)       each expert's tokens in one matmul, summed
//                                                       into the output expert by expert
//   (Qwen2-MoE) out += sigmoid(shared_expert_gate(x)) · shared_expert(x)
// No token is dropped (transformers drops none). Every expert runs every forward, on the tokens
// that chose it — none at all, possibly: its weights are then in the graph with a gradient of
// exactly zero, so every rank reduces every expert's gradient in the same order whatever the
// routing (the ZeRO-3 hang of an expert no token reached — DeepSpeed issue 7461 — cannot happen;
// a decoder layer is one zero::Unit, experts included).
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "models/llama/llama.h"

namespace zero::llama {

struct SparseMoeBlock : torch::nn::Module {
  // `router_logits`: where each forward's logits go for the load-balancing loss (null: nowhere).
  // `experts`: with expert parallelism, this rank builds its share of the experts only.
  SparseMoeBlock(const LlamaConfig& config, WeightSource& source, const std::vector<HfTensor>& tensors, int layer,
                 at::ScalarType dtype, std::shared_ptr<RouterLogits> router_logits, const ExpertPlace& experts = {});
  at::Tensor forward(const at::Tensor& x);  // [B, T, hidden] → the same

  const MoeConfig& moe;
  std::shared_ptr<RouterLogits> router_logits;
  ExpertPlace place;
  int64_t first_expert = 0;  // the number of experts[0] in the layer
  std::shared_ptr<Weights> gate;
  std::shared_ptr<torch::nn::Module> expert_list;  // registered as "experts": "0", "1", ... (this rank's)
  std::vector<std::shared_ptr<LlamaMlp>> experts;
  std::shared_ptr<LlamaMlp> shared_expert;         // Qwen2-MoE's (null for Mixtral)
  std::shared_ptr<Weights> shared_expert_gate;
  // The load: per expert, the tokens that chose it in the training forwards so far (not in
  // evaluation, nor in a checkpointed layer's recomputation). int64, on the CPU.
  at::Tensor tokens_per_expert;

 private:
  // Expert parallelism: each (token, place) pair's row to the rank holding its expert, computed
  // there, and back; returns the pairs' weighted outputs summed per token, experts in order.
  at::Tensor exchanged(const at::Tensor& x, const at::Tensor& weights, const at::Tensor& chosen);
};

// transformers' load_balancing_loss_func without an attention mask: the layers' router logits
// pooled ([Σ tokens, experts]), their softmax p, each token's top-k picks; E · Σ over the k and
// the experts of (the share of picks going to the expert) · (its mean p). Uniform routing gives k.
at::Tensor load_balancing_loss(const RouterLogits& router_logits, int64_t num_experts, int64_t experts_per_token);

}  // namespace zero::llama
