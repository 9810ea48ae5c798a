#include "models/llama/llama.h"

#include "models/llama/four_bit.h"
#include "models/llama/llama_moe.h"
#include "models/llama/llama_tensor_parallel.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>

#include <fmt/core.h>

#include "zero/activation_checkpoint.h"
#include "zero/compute.h"
#include "zero/error.h"
#include "zero/tensor_parallel.h"

namespace zero::llama {
namespace {

class RandomWeights : public WeightSource {
 public:
  at::Tensor get(const HfTensor& t, at::ScalarType dtype) override {
    const bool vector = t.shape.size() == 1;
    const bool norm = vector && t.name.find("norm") != std::string::npos;
    at::Tensor out = vector ? (norm ? torch::ones(t.shape) : torch::zeros(t.shape)) : torch::randn(t.shape).mul_(0.02);
    return out.to(dtype);
  }
};

const HfTensor& find_tensor(const std::vector<HfTensor>& tensors, const std::string& name) {
  for (const auto& t : tensors)
    if (t.name == name) return t;
  throw Error("no tensor " + name + " in the model's layout", name);
}

bool has_tensor(const std::vector<HfTensor>& tensors, const std::string& name) {
  for (const auto& t : tensors)
    if (t.name == name) return true;
  return false;
}

std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

at::Tensor linear(const at::Tensor& x, Weights& w) { return w.forward(x); }


// transformers' default inverse frequencies, then its linear or llama3 rescaling
// (modeling_rope_utils.py), in fp32 and in the same operations (Python's `a / tensor` is
// tensor.reciprocal() * a).
at::Tensor inverse_frequencies(const LlamaConfig& c) {
  const int64_t dim = c.head_dim;
  const at::Tensor exponent = torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat) / static_cast<double>(dim);
  at::Tensor inv_freq = torch::pow(c.rope_theta, exponent).reciprocal() * 1.0;
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScaling::Type::kLinear) return inv_freq / s.factor;
  if (s.type != RopeScaling::Type::kLlama3) return inv_freq;
  const double old_context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / s.low_freq_factor, high_freq_wavelen = old_context / s.high_freq_factor;
  const at::Tensor wavelen = inv_freq.reciprocal() * (2 * M_PI);
  at::Tensor scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  const at::Tensor smooth = (wavelen.reciprocal() * old_context - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const at::Tensor medium = (wavelen < high_freq_wavelen).logical_not() & (wavelen > low_freq_wavelen).logical_not();
  return torch::where(medium, smoothed, scaled);
}

}  // namespace

std::unique_ptr<WeightSource> random_weights() { return std::make_unique<RandomWeights>(); }

at::Tensor WeightSource::get_slice(const HfTensor& tensor, at::ScalarType dtype, int64_t dim, int64_t start,
                                   int64_t length) {
  return get(tensor, dtype).narrow(dim, start, length).contiguous().clone();
}

Weights::Weights(WeightSource& source, const std::string& prefix, const std::vector<HfTensor>& tensors,
                 at::ScalarType dtype, const TensorParallelPlace& place) {
  // Each tensor as split_of splits it (Megatron's layout): a slice of its output features or of
  // the vocabulary's rows (dimension 0), of its input features (1), or whole.
  auto load = [&](const HfTensor& t) {
    const int dim = split_dim(split_of(t.name));
    if (dim < 0 || place.size == 1) return source.get(t, dtype);
    const SliceRange r = slice_range(t.shape[static_cast<size_t>(dim)], place.rank, place.size);
    return source.get_slice(t, dtype, dim, r.start, r.length);
  };
  weight = register_parameter("weight", load(find_tensor(tensors, prefix + "weight")));
  if (has_tensor(tensors, prefix + "bias")) bias = register_parameter("bias", load(find_tensor(tensors, prefix + "bias")));
}

void Weights::quantize_to_4bit(int type, bool double_quant) {
  const FourBitWeight q = quantize_4bit(weight, static_cast<FourBitType>(type), double_quant);
  parameters_.erase("weight");
  weight = at::Tensor();
  weight_codes = register_parameter("weight_codes", q.codes, /*requires_grad=*/false);
  weight_absmax = register_parameter("weight_absmax", q.absmax.view(at::kByte), /*requires_grad=*/false);
  if (q.double_quant()) {
    weight_absmax2 = register_parameter("weight_absmax2", q.absmax2.view(at::kByte), /*requires_grad=*/false);
  }
  four_bit_double_quant = q.double_quant();
  four_bit_shape = q.shape;
  four_bit_type = type;
  four_bit_offset = q.offset;
}

at::Tensor Weights::forward(const at::Tensor& x) {
  const at::Tensor y = weight_codes.defined()
                           ? linear_4bit(x, static_cast<FourBitType>(four_bit_type), four_bit_shape, weight_codes,
                                         four_bit_double_quant ? weight_absmax : weight_absmax.view(at::kFloat),
                                         four_bit_double_quant ? weight_absmax2.view(at::kFloat) : at::Tensor(),
                                         four_bit_offset, bias)
                           : zero::linear(x, weight, bias);
  if (!lora_A) return y;
  // PEFT's order: the base's output plus the adapter's, scaled after lora_B.
  const at::Tensor in = lora_dropout > 0 ? torch::dropout(x, lora_dropout, is_training()) : x;
  return y + zero::linear(zero::linear(in, lora_A->weight, at::Tensor()), lora_B->weight, at::Tensor()) * lora_scaling;
}

RotaryTables::RotaryTables(const LlamaConfig& config) : inv_freq_(inverse_frequencies(config)) {}

std::pair<at::Tensor, at::Tensor> RotaryTables::cos_sin(int64_t seq, at::ScalarType dtype, at::Device device) {
  if (!cos_.defined() || cos_.size(0) != seq) {
    cos_cast_ = sin_cast_ = at::Tensor();
    torch::NoGradGuard no_grad;
    const at::Tensor positions = torch::arange(seq, torch::kLong).to(torch::kFloat);
    const at::Tensor freqs = positions.unsqueeze(1) * inv_freq_.unsqueeze(0);  // [T, D/2], one rounding each
    const at::Tensor angles = torch::cat({freqs, freqs}, -1);
    cos_ = angles.cos();
    sin_ = angles.sin();
  }
  if (device.is_cpu()) return {cos_.to(dtype), sin_.to(dtype)};
  if (!cos_cast_.defined() || cos_cast_.device() != device || cos_cast_.scalar_type() != dtype) {
    cos_cast_ = cos_.to(device, dtype);
    sin_cast_ = sin_.to(device, dtype);
  }
  return {cos_cast_, sin_cast_};
}

LlamaAttention::LlamaAttention(const LlamaConfig&, WeightSource& source, const std::vector<HfTensor>& tensors,
                               int layer, at::ScalarType dtype, const TensorParallelPlace& place) {
  const std::string p = layer_prefix(layer) + "self_attn.";
  auto make = [&](const char* name) {
    return register_module(name, std::make_shared<Weights>(source, p + name + ".", tensors, dtype, place));
  };
  q_proj = make("q_proj");
  k_proj = make("k_proj");
  v_proj = make("v_proj");
  o_proj = make("o_proj");
}

LlamaMlp::LlamaMlp(WeightSource& source, const std::vector<HfTensor>& tensors, const std::string& prefix,
                   at::ScalarType dtype, const TensorParallelPlace& place, const std::vector<std::string>& names) {
  auto make = [&](const std::string& name) {
    return register_module(name, std::make_shared<Weights>(source, prefix + name + ".", tensors, dtype, place));
  };
  gate_proj = make(names.at(0));
  up_proj = make(names.at(1));
  down_proj = make(names.at(2));
}

at::Tensor LlamaMlp::forward(const at::Tensor& x) {
  return linear(zero::swiglu(linear(x, *gate_proj), linear(x, *up_proj)), *down_proj);
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c, std::shared_ptr<RotaryTables> r, WeightSource& source,
                                     const std::vector<HfTensor>& tensors, int layer, at::ScalarType dtype,
                                     const TensorParallelPlace& tp, std::shared_ptr<LoadBalance> load_balance,
                                     const ExpertPlace& experts)
    : config(c),
      rope(std::move(r)),
      place(tp),
      heads(c.num_attention_heads / tp.size),
      kv_heads(c.num_key_value_heads / tp.size) {
  // Registration order is transformers' (the engine lays buckets out from it).
  const std::string p = layer_prefix(layer);
  self_attn = register_module("self_attn", std::make_shared<LlamaAttention>(c, source, tensors, layer, dtype, tp));
  if (c.is_moe_layer(layer)) {
    const std::string name = c.moe_prefix();
    moe = register_module(name.substr(0, name.size() - 1),
                          std::make_shared<SparseMoeBlock>(c, source, tensors, layer, dtype, std::move(load_balance), experts));
  } else {
    mlp = register_module("mlp", std::make_shared<LlamaMlp>(source, tensors, p + "mlp.", dtype, tp));
  }
  input_layernorm =
      register_module("input_layernorm", std::make_shared<Weights>(source, p + "input_layernorm.", tensors, dtype));
  post_attention_layernorm = register_module(
      "post_attention_layernorm", std::make_shared<Weights>(source, p + "post_attention_layernorm.", tensors, dtype));
}

at::Tensor LlamaDecoderLayer::forward(const at::Tensor& x) {
  const int64_t H = heads, KV = kv_heads, D = config.head_dim;
  // Under tensor parallelism each block's input enters whole and its column-parallel layers make
  // this rank's heads (and MLP features); the row-parallel output's partial sums are added over
  // the group before the residual (and its bias after the sum). With sequence parallelism the
  // input arrives split along the sequence and is all-gathered, and the sums are reduce-scattered
  // back into it; the norms (and those biases) then see this member's tokens only, so their
  // gradients are summed over the group where they are used.
  const bool split = place.group != nullptr, sequence = split && place.sequence_parallel;
  auto enter = [&](const at::Tensor& t) {
    if (!split) return t;
    return sequence ? gather_from_sequence_parallel(t, *place.group) : copy_to_tensor_parallel(t, *place.group);
  };
  auto whole = [&](const at::Tensor& w) { return sequence ? copy_to_tensor_parallel(w, *place.group) : w; };
  auto leave = [&](const at::Tensor& t, Weights& w) {
    if (!split) return linear(t, w);
    const at::Tensor partial = zero::linear(t, w.weight, at::Tensor());
    const at::Tensor summed = sequence ? reduce_scatter_to_sequence_parallel(partial, *place.group)
                                       : reduce_from_tensor_parallel(partial, *place.group);
    return w.bias.defined() ? summed + compute(whole(w.bias)) : summed;
  };
  const at::Tensor h = enter(rms_norm(x, whole(input_layernorm->weight), config.rms_norm_eps));
  const int64_t B = h.size(0), T = h.size(1);
  const auto [cos, sin] = rope->cos_sin(T, h.scalar_type(), h.device());
  auto by_head = [&](const at::Tensor& t, int64_t n) { return t.view({B, T, n, D}).transpose(1, 2); };
  at::Tensor q = by_head(linear(h, *self_attn->q_proj), H), k = by_head(linear(h, *self_attn->k_proj), KV);
  const at::Tensor v = by_head(linear(h, *self_attn->v_proj), KV);
  q = zero::rotary_embedding(q, cos, sin);  // [B, H, T, D], contiguous
  k = zero::rotary_embedding(k, cos, sin);
  const at::Tensor attended = zero::causal_attention(q, k, v, config.sliding_window);
  const at::Tensor y = x + leave(attended.transpose(1, 2).reshape({B, T, H * D}), *self_attn->o_proj);
  const at::Tensor n2 = enter(rms_norm(y, whole(post_attention_layernorm->weight), config.rms_norm_eps));
  if (moe) return y + moe->forward(n2);  // (no tensor parallelism: the model refuses it)
  return y + leave(zero::swiglu(linear(n2, *mlp->gate_proj), linear(n2, *mlp->up_proj)), *mlp->down_proj);
}

LlamaModel::LlamaModel(const LlamaConfig& c, WeightSource& source, at::ScalarType dtype, const TensorParallelPlace& tp,
                       const PipelinePlace& stage, std::shared_ptr<LoadBalance> load_balance, const ExpertPlace& experts) {
  const std::vector<HfTensor> tensors = llama_tensors(c);
  if (stage.first()) {
    embed_tokens = register_module(
        "embed_tokens", std::make_shared<Weights>(source, "model.embed_tokens.", tensors, dtype, tp));
  }
  layer_list = register_module("layers", std::make_shared<torch::nn::Module>());
  auto rope = std::make_shared<RotaryTables>(c);
  const int end = stage.end_layer < 0 ? static_cast<int>(c.num_hidden_layers) : stage.end_layer;
  for (int l = stage.first_layer; l < end; ++l) {  // named by their place in the whole model
    layers.push_back(layer_list->register_module(
        std::to_string(l),
        std::make_shared<zero::Unit<LlamaDecoderLayer>>(c, rope, source, tensors, l, dtype, tp, load_balance, experts)));
  }
  if (stage.last()) norm = register_module("norm", std::make_shared<Weights>(source, "model.norm.", tensors, dtype));
}

namespace {

// Attention heads and key/value heads split evenly over the group, or an error naming both numbers.
void check_heads_split(const LlamaConfig& c, int size) {
  for (const auto& [key, heads] : {std::pair<const char*, int64_t>{"num_attention_heads", c.num_attention_heads},
                                   {"num_key_value_heads", c.num_key_value_heads}}) {
    if (heads % size == 0) continue;
    throw Error(fmt::format("tensor parallelism over {} ranks: {} {} does not split into {} equal parts{}", size,
                            key, heads, size,
                            heads < size ? " (zerocpp does not replicate key/value heads across a group yet)" : ""),
                "tensor_parallel.autotp_size");
  }
}

}  // namespace

LlamaForCausalLM::LlamaForCausalLM(LlamaConfig c, WeightSource& source, at::ScalarType dtype,
                                   const TensorParallelPlace& tp, const PipelinePlace& pipeline, const ExpertPlace& experts)
    : config(std::move(c)), place(tp), stage(pipeline) {
  if (place.size > 1) check_heads_split(config, place.size);
  if (place.size == 1) place.group = nullptr;
  if (config.moe.num_experts > 0 && place.size > 1) {
    throw Error(fmt::format("tensor parallelism with {}'s experts is not built yet (expert parallelism is the way "
                            "to split them)",
                            config.family_name()),
                "tensor_parallel.autotp_size");
  }
  if (config.moe.output_router_logits) {
    if (pipeline.stages > 1) {
      throw Error(fmt::format("{}'s load-balancing loss (output_router_logits) with pipeline stages is not built yet: "
                              "its router logits are on every stage",
                              config.family_name()),
                  "pipeline_parallel.pp_size");
    }
    load_balance = std::make_shared<LoadBalance>();
  }
  if (stage.end_layer < 0) stage.end_layer = static_cast<int>(config.num_hidden_layers);
  vocab_start = slice_range(config.vocab_size, place.rank, place.size).start;
  if (experts.size > 1 && config.moe.num_experts % experts.size != 0) {
    throw Error(fmt::format("expert parallelism over {} ranks: {} experts do not split evenly", experts.size,
                            config.moe.num_experts),
                "expert_parallel.autoep_size");
  }
  model = register_module("model",
                          std::make_shared<LlamaModel>(config, source, dtype, place, stage, load_balance, experts));
  if (stage.last() && !config.tie_word_embeddings) {
    lm_head = register_module(
        "lm_head", std::make_shared<Weights>(source, "lm_head.", llama_tensors(config), dtype, place));
  } else if (stage.last() && !stage.first()) {
    tied_copy = std::make_shared<Weights>(source, "model.embed_tokens.", llama_tensors(config), dtype, place);
  }
}

const at::Tensor& LlamaForCausalLM::output_weight() const {
  if (lm_head) return lm_head->weight;
  return tied_copy ? tied_copy->weight : model->embed_tokens->weight;
}

at::Tensor LlamaForCausalLM::embed(const at::Tensor& tokens) {
  if (load_balance) load_balance->start();  // a forward starts
  const int64_t T = tokens.size(1);
  if (T > config.max_position_embeddings) {
    throw Error("a sequence of " + std::to_string(T) + " tokens is longer than max_position_embeddings " +
                    std::to_string(config.max_position_embeddings),
                "max_position_embeddings");
  }
  if (place.group) {
    if (place.sequence_parallel && T % place.size != 0) {
      throw Error(fmt::format("sequence parallelism: a sequence of {} tokens does not split over {} tensor-parallel ranks",
                              T, place.size),
                  "sequence_parallel");
    }
    return vocab_parallel_embedding(tokens, compute(model->embed_tokens->weight), vocab_start, *place.group,
                                    config.pad_token_id, place.sequence_parallel);
  }
  namespace F = torch::nn::functional;
  F::EmbeddingFuncOptions lookup;
  if (config.pad_token_id >= 0) lookup.padding_idx(config.pad_token_id);
  return F::embedding(tokens, compute(model->embed_tokens->weight), lookup);
}

at::Tensor LlamaForCausalLM::blocks(const at::Tensor& x) {
  // A block's input is whole on every member (unless sequence-parallel): each can keep 1/n of it.
  Communicator* partition = partition_activations && !place.sequence_parallel ? place.group : nullptr;
  return zero::checkpointing::run_blocks(model->layers, x, checkpoint_every, partition);
}

at::Tensor LlamaForCausalLM::final_norm(const at::Tensor& x) {
  if (!place.sequence_parallel || !place.group) return rms_norm(x, model->norm->weight, config.rms_norm_eps);
  return rms_norm(x, copy_to_tensor_parallel(model->norm->weight, *place.group), config.rms_norm_eps);
}

at::Tensor LlamaForCausalLM::hidden(const at::Tensor& tokens) { return final_norm(blocks(embed(tokens))); }

at::Tensor LlamaForCausalLM::head_loss(const at::Tensor& h, const at::Tensor& targets, bool mean) {
  if (place.group) {
    // The final norm's output as the lm_head's slices take it: whole on every member (the
    // gradients of its partial products summed over the group), all-gathered from the sequence's
    // split. Each rank's logits for its slice of the vocabulary: [B·T, V/tp], never the whole.
    const at::Tensor input =
        place.sequence_parallel ? gather_from_sequence_parallel(h, *place.group) : copy_to_tensor_parallel(h, *place.group);
    const at::Tensor logits = zero::linear(input, output_weight());
    return vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape(-1), vocab_start,
                                        *place.group, mean, -100);
  }
  const at::Tensor loss = zero::linear_cross_entropy(h, output_weight(), targets, mean, -100);
  if (!load_balance || load_balance->empty()) return loss;
  // transformers adds router_aux_loss_coef x the load-balancing loss of this forward's routers.
  if (!mean) {
    throw Error(fmt::format("{}'s load-balancing loss (output_router_logits) beside a loss summed over tokens "
                            "(zero-finetune's) is not built yet",
                            config.family_name()),
                "output_router_logits");
  }
  return loss + config.moe.router_aux_loss_coef * load_balance->loss();
}

at::Tensor LlamaForCausalLM::forward(const at::Tensor& tokens) {
  if (place.group) {
    throw Error("the whole vocabulary's logits are not gathered under tensor parallelism (the loss does without them)",
                "tensor_parallel.autotp_size");
  }
  return zero::linear(hidden(tokens), output_weight());
}

at::Tensor LlamaForCausalLM::loss(const at::Tensor& tokens, const at::Tensor& targets) {
  return head_loss(hidden(tokens), targets, /*mean=*/true);
}

at::Tensor LlamaForCausalLM::loss_sum(const at::Tensor& tokens, const at::Tensor& targets) {
  return head_loss(hidden(tokens), targets, /*mean=*/false);
}

at::Tensor LlamaForCausalLM::stage_forward(const at::Tensor& tokens, const at::Tensor& targets,
                                           const at::Tensor& received, bool mean) {
  const at::Tensor x = blocks(stage.first() ? embed(tokens) : received);
  return stage.last() ? head_loss(final_norm(x), targets, mean) : x;
}

}  // namespace zero::llama
