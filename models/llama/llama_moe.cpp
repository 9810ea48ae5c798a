// The mixture-of-experts layer and the load-balancing loss (llama_moe.h).
#include "models/llama/llama_moe.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include <chrono>

#include "zero/activation_checkpoint.h"
#include "zero/compute.h"
#include "zero/expert_parallel.h"

namespace zero::llama {

// Charges the time since its last charge to one of a layer's parts.
class SparseMoeBlock::Stopwatch {
 public:
  void charge(double& part) {
    const auto now = std::chrono::steady_clock::now();
    part += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

SparseMoeBlock::SparseMoeBlock(const LlamaConfig& c, WeightSource& source, const std::vector<HfTensor>& tensors,
                               int layer, at::ScalarType dtype, std::shared_ptr<LoadBalance> balance,
                               const ExpertPlace& experts_place)
    : moe(c.moe), load_balance(std::move(balance)), place(experts_place) {
  if (place.size <= 1) place = {};
  const int64_t here = moe.num_experts / place.size;
  first_expert = place.rank * here;
  const std::string p = "model.layers." + std::to_string(layer) + "." + c.moe_prefix();
  // Registration order is transformers' (the engine lays buckets out from it).
  gate = register_module("gate", std::make_shared<Weights>(source, p + "gate.", tensors, dtype));
  expert_list = register_module("experts", std::make_shared<torch::nn::Module>());
  for (int64_t e = first_expert; e < first_expert + here; ++e) {
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
  Stopwatch clock;
  const int64_t hidden = h.size(-1), k = moe.experts_per_token;
  const at::Tensor x = h.reshape({-1, hidden});
  const at::Tensor logits = zero::linear(x, gate->weight, at::Tensor());
  auto [weights, chosen] = torch::softmax(logits, 1, at::kFloat).topk(k, -1);
  if (moe.normalize_top_k) weights = weights / weights.sum(-1, /*keepdim=*/true);
  weights = weights.to(x.scalar_type());
  // [experts, k, tokens]: which tokens chose each expert, and in which of their k places.
  const at::Tensor hits = torch::one_hot(chosen, moe.num_experts).permute({2, 1, 0});
  if (at::GradMode::is_enabled() && !checkpointing::detail::recomputing())
    tokens_per_expert += hits.sum({1, 2}).to(at::kCPU);
  clock.charge(seconds.router);
  at::Tensor out = place.group ? exchanged(x, weights, chosen, clock) : torch::zeros_like(x);
  if (!place.group) {
    for (int64_t e = 0; e < moe.num_experts; ++e) {
      const at::Tensor where = hits[e].nonzero();  // (slot, token) pairs, slot-major as torch.where gives them
      const at::Tensor slot = where.select(1, 0), token = where.select(1, 1);
      const at::Tensor rows = x.index_select(0, token);
      clock.charge(seconds.dispatch);
      const at::Tensor y = experts[static_cast<size_t>(e)]->forward(rows);
      clock.charge(seconds.experts);
      out.index_add_(0, token, (y * weights.index({token, slot}).unsqueeze(-1)).to(x.scalar_type()));
      clock.charge(seconds.combine);
    }
  }
  if (shared_expert) {
    out = out + torch::sigmoid(zero::linear(x, shared_expert_gate->weight, at::Tensor())) * shared_expert->forward(x);
    clock.charge(seconds.experts);
  }
  out = out.view(h.sizes());
  if (!load_balance) return out;
  // The load-balancing loss's probabilities: transformers' softmax of the logits in their dtype.
  const at::Tensor probs = torch::softmax(logits, -1);
  out = load_balance->record(out, probs, std::get<1>(probs.topk(k, -1)));
  clock.charge(seconds.router);
  return out;
}

at::Tensor SparseMoeBlock::exchanged(const at::Tensor& x, const at::Tensor& weights, const at::Tensor& chosen,
                                     Stopwatch& clock) {
  namespace ep = zero::expert_parallel;
  Communicator& group = *place.group;
  const int64_t k = chosen.size(1), here = moe.num_experts / place.size;
  // The (token, place) pairs sorted by expert (stably: each expert's tokens in order), so that
  // each rank's share is one run of rows, and the sums below go expert by expert as without
  // expert parallelism.
  const at::Tensor pairs = chosen.reshape(-1);  // pair p: token p / k, place p % k
  const at::Tensor order = std::get<1>(pairs.sort(/*stable=*/true, 0, /*descending=*/false));
  const at::Tensor expert_of = pairs.index_select(0, order);
  const at::Tensor token_of = order.div(k, "floor");
  // Every rank's pairs per expert ([ranks, experts]): what each rank sends and receives, and which
  // expert each received row is for (a sender's rows come expert by expert).
  const at::Tensor per_expert = torch::bincount(expert_of, {}, moe.num_experts);
  const at::Tensor counts = ep::all_gather_counts(group, per_expert).view({place.size, place.size, here});
  const at::Tensor to_rank = counts[place.rank].sum(1), to_me = counts.select(1, place.rank);  // [ranks], [ranks, here]
  const std::vector<int64_t> send(to_rank.data_ptr<int64_t>(), to_rank.data_ptr<int64_t>() + place.size);
  const at::Tensor from_rank = to_me.sum(1).contiguous();
  const std::vector<int64_t> receive(from_rank.data_ptr<int64_t>(), from_rank.data_ptr<int64_t>() + place.size);
  const at::Tensor rows = ep::exchange_rows(group, x.index_select(0, token_of), send, receive);
  const at::Tensor ids =
      torch::arange(first_expert, first_expert + here, torch::kLong).repeat(place.size).repeat_interleave(to_me.reshape(-1));
  clock.charge(seconds.dispatch);
  // Every expert here runs, on its rows from every rank — none, possibly (a zero gradient).
  at::Tensor results = torch::zeros_like(rows);
  for (int64_t i = 0; i < here; ++i) {
    const at::Tensor mine = (ids == first_expert + i).nonzero().squeeze(1);
    results = results.index_add(0, mine, experts[static_cast<size_t>(i)]->forward(rows.index_select(0, mine)));
  }
  clock.charge(seconds.experts);
  const at::Tensor back = ep::exchange_rows(group, results, receive, send);  // the pairs' outputs, in `order`
  const at::Tensor weight_of = weights.reshape(-1).index_select(0, order).unsqueeze(1);
  at::Tensor out = torch::zeros_like(x).index_add_(0, token_of, (back * weight_of).to(x.scalar_type()));
  clock.charge(seconds.combine);
  return out;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A MoE layer's output joined to its Σ_rows p: the output's gradient passes through, and Σ_rows p
// gets the load-balancing term's gradient (LoadBalance::layer_gradient, set by the term's node,
// whose backward runs first: it hangs from the loss itself).
struct JoinLayer : torch::autograd::Function<JoinLayer> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& output, const at::Tensor& probability_sum,
                            int64_t balance) {
    ctx->saved_data["balance"] = balance;
    ctx->saved_data["experts"] = probability_sum.size(0);
    return output.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const LoadBalance& balance = *reinterpret_cast<LoadBalance*>(ctx->saved_data["balance"].toInt());
    at::Tensor sum_grad = balance.layer_gradient.defined() ? balance.layer_gradient
                                                           : at::zeros({ctx->saved_data["experts"].toInt()}, at::kFloat);
    return {grads[0], sum_grad, at::Tensor()};
  }
};

// The term: its value computed from the recorded sums; its backward learns g and gives each
// layer's node its share.
struct BalanceTerm : torch::autograd::Function<BalanceTerm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& anchor, const at::Tensor& value, int64_t balance) {
    ctx->saved_data["balance"] = balance;
    return value.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    LoadBalance& balance = *reinterpret_cast<LoadBalance*>(ctx->saved_data["balance"].toInt());
    balance.layer_gradient = balance.picks_share * grads[0].to(at::kFloat).to(at::kCPU);
    return {at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

void LoadBalance::start() {
  probability_sums_ = picks_ = picks_share = layer_gradient = at::Tensor();
  rows_ = 0;
}

at::Tensor LoadBalance::record(const at::Tensor& output, const at::Tensor& probs, const at::Tensor& picks) {
  const int64_t experts = probs.size(-1);
  const at::Tensor probability_sum = probs.sum(0, /*keepdim=*/false, at::kFloat);
  if (!checkpointing::detail::recomputing()) {  // a checkpointed layer's second run is counted once
    const at::Tensor picked = torch::one_hot(picks, experts).sum(at::IntArrayRef{0, 1}).to(at::kCPU);
    const at::Tensor sum = probability_sum.detach().to(at::kCPU);
    probability_sums_ = probability_sums_.defined() ? probability_sums_ + sum : sum;
    picks_ = picks_.defined() ? picks_ + picked : picked;
    rows_ += probs.size(0);
  }
  if (!at::GradMode::is_enabled() || !probability_sum.requires_grad()) return output;
  return JoinLayer::apply(output, probability_sum, reinterpret_cast<int64_t>(this));
}

at::Tensor LoadBalance::loss() {
  const double experts = static_cast<double>(picks_.size(0)), rows = static_cast<double>(rows_);
  const at::Tensor share = picks_.to(at::kFloat) / rows;
  picks_share = share * (experts / rows);  // ∂aux/∂(a layer's Σ_rows p) = E · picks / N²
  const at::Tensor value = (share * (probability_sums_ / rows)).sum() * experts;
  if (!at::GradMode::is_enabled()) return value;
  if (!anchor_.defined()) anchor_ = at::zeros({}, at::kFloat).requires_grad_(true);
  return BalanceTerm::apply(anchor_, value, reinterpret_cast<int64_t>(this));
}

}  // namespace zero::llama
