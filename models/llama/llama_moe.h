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

// transformers' load_balancing_loss_func (without an attention mask) over one forward's MoE
// layers, gathered layer by layer: with p the softmax of a layer's router logits (in their dtype),
// pooled over the layers' N rows,
//   aux = E · Σ_e (picks_e / N) · (Σ_rows p_e / N)
// with picks_e the rows' top-k picks of expert e (uniform routing gives k). It is linear in each
// layer's Σ_rows p (the picks have no gradient), so a layer's share of its gradient is
// g · E · picks / N², g the gradient the loss gives the term: each layer joins its output to the
// graph through a node whose backward adds that to its Σ_rows p. A checkpointed layer, whose first
// run has no graph, gets it when it runs again in backward — so the term trains with activation
// checkpointing too.
class LoadBalance {
 public:
  void start();  // a forward begins: nothing recorded
  bool empty() const { return rows_ == 0; }
  // A MoE layer's routing: `probs` [rows, experts] (with its graph, when training) and the rows'
  // top-k picks [rows, k]. Returns `output`, joined to `probs` for the backward when training.
  at::Tensor record(const at::Tensor& output, const at::Tensor& probs, const at::Tensor& picks);
  at::Tensor loss();  // aux, a scalar (fp32) whose gradient reaches every recorded layer

  // (The autograd nodes': the gradient of aux times g for each layer's Σ_rows p, once known.)
  at::Tensor layer_gradient;  // [experts] fp32, undefined until the term's backward ran
  at::Tensor picks_share;     // E · picks / N², the same for every layer

 private:
  at::Tensor probability_sums_;  // Σ over the layers' rows of p, fp32 [experts] (values only)
  at::Tensor picks_;             // [experts] int64
  int64_t rows_ = 0;
  at::Tensor anchor_;            // a leaf the term hangs from (its backward learns g there)
};

struct SparseMoeBlock : torch::nn::Module {
  // `load_balance`: where each forward's routing goes for the load-balancing loss (null: nowhere).
  // `experts`: with expert parallelism, this rank builds its share of the experts only.
  SparseMoeBlock(const LlamaConfig& config, WeightSource& source, const std::vector<HfTensor>& tensors, int layer,
                 at::ScalarType dtype, std::shared_ptr<LoadBalance> load_balance, const ExpertPlace& experts = {});
  at::Tensor forward(const at::Tensor& x);  // [B, T, hidden] → the same

  const MoeConfig& moe;
  std::shared_ptr<LoadBalance> load_balance;
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
  // Where this layer's forwards spent their time so far (recomputations included), in seconds:
  // the router (gate, softmax, top-k, the load's counts), the dispatch (each expert's rows picked
  // out; with expert parallelism sorted and sent to their ranks), the experts (the shared one
  // too), and the combine (rows back, weighted and summed per token).
  struct Seconds {
    double router = 0, dispatch = 0, experts = 0, combine = 0;
  } seconds;

 private:
  // Expert parallelism: each (token, place) pair's row to the rank holding its expert, computed
  // there, and back; returns the pairs' weighted outputs summed per token, experts in order.
  class Stopwatch;
  at::Tensor exchanged(const at::Tensor& x, const at::Tensor& weights, const at::Tensor& chosen, Stopwatch& clock);
};

}  // namespace zero::llama
