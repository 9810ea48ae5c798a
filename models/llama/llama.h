// The Llama decoder family in LibTorch (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM),
// computing what transformers' modeling_llama.py / modeling_mistral.py / modeling_qwen2.py
// compute in eager mode:
//   x = embed_tokens[tokens]
//   per layer: h = x + o_proj(attention(rope(q_proj(n1(x))), rope(k_proj(n1(x))), v_proj(n1(x))))
//              x = h + down_proj(silu(gate_proj(n2(h))) * up_proj(n2(h)))
//   logits = lm_head(norm(x))   (lm_head is embed_tokens when tie_word_embeddings)
// RMSNorm in fp32 (x·rsqrt(mean(x²)+eps), cast back, then times the weight); rotary embeddings
// in the rotate-half layout (the q/k weights as Hugging Face stores them) with cos/sin computed
// in fp32 and cast to the activations' dtype; grouped-query attention (each key/value head serves
// num_attention_heads / num_key_value_heads query heads, without copying k and v); scores scaled
// by head_dim^-1/2, causal (and Mistral's sliding window), softmax in fp32; the loss is the mean
// cross-entropy of fp32 logits.
//
// Parameters are named as Hugging Face names them, with each decoder layer a zero::Unit (stage 3
// shards layer by layer), so the engine sees "model.layers.3.block.mlp.up_proj.weight" where the
// file says "model.layers.3.mlp.up_proj.weight" (hf_name maps one to the other).
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "models/llama/llama_config.h"
#include "zero/unit.h"

namespace zero {
class Communicator;
}

namespace zero::llama {

// Where a model's weights come from while it is built: a tensor of the given name and shape, as
// a new tensor of `dtype` (never sharing a file's pages).
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual at::Tensor get(const HfTensor& tensor, at::ScalarType dtype) = 0;
  // Elements [start, start + length) of dimension `dim` (a tensor-parallel slice); by default cut
  // from get(), which a source that can read less overrides.
  virtual at::Tensor get_slice(const HfTensor& tensor, at::ScalarType dtype, int64_t dim, int64_t start,
                               int64_t length);
};

// Tensor parallelism (zero/tensor_parallel.h): this rank's place in its group. Column-parallel
// (q/k/v, gate/up: a slice of the output features, biases with them) and row-parallel (o, down: a
// slice of the input features; their biases whole, added after the sum) as Megatron splits them;
// attention and key/value heads split across the group; the embedding and lm_head split along the
// vocabulary. Norms are whole on every member.
struct TensorParallelPlace {
  Communicator* group = nullptr;  // null: the whole model
  int rank = 0, size = 1;
  // Megatron's sequence parallelism: the residual stream and the norms hold T/size of the tokens
  // on each member, all-gathered into each block's regions and reduce-scattered out of them.
  bool sequence_parallel = false;
};

// Pipeline parallelism (zero/pipeline.h): this rank's stage — decoder layers [first_layer,
// end_layer), the embedding on the first stage, the final norm and lm_head on the last. A tied
// lm_head on a last stage that is not also the first is a copy of the embedding kept outside the
// engine (LlamaForCausalLM::tied_copy; the schedule keeps it equal to the first stage's).
struct PipelinePlace {
  int stage = 0, stages = 1;
  int first_layer = 0, end_layer = -1;  // -1: to the last layer
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
};

// Expert parallelism (zero/expert_parallel.h, docs/moe.md): this rank's place in its
// expert-parallel group, over which each MoE layer's experts are split evenly — rank r holds
// experts [r·E/n, (r+1)·E/n), named by their number in the whole layer. The router, the shared
// expert and every other weight are whole on every member.
struct ExpertPlace {
  Communicator* group = nullptr;  // null: every expert here
  int rank = 0, size = 1;
};

// Which way a weight is split over the tensor-parallel group (llama_tensor_parallel.h: split_of).
enum class Split { kWhole, kColumn, kRow, kVocabulary };

// Random weights from torch's global generator (every rank seeded alike draws the same):
// matrices normal(0, 0.02), norms 1, biases 0 — transformers' _init_weights.
std::unique_ptr<WeightSource> random_weights();

// One of a LoRA adapter's two matrices (lora.h), a module so that its name is PEFT's ("lora_A.weight").
struct LoraMatrix : torch::nn::Module {
  explicit LoraMatrix(const at::Tensor& value) { weight = register_parameter("weight", value); }
  at::Tensor weight;
};

// A weight (and bias) as stored: a module so that the names come out as transformers' do.
struct Weights : torch::nn::Module {
  // With tensor parallelism, this rank's slice of each tensor, as split_of splits it.
  Weights(WeightSource& source, const std::string& prefix, const std::vector<HfTensor>& tensors, at::ScalarType dtype,
          const TensorParallelPlace& place = {});
  at::Tensor weight, bias;  // bias undefined when the layer has none
  // A LoRA adapter (lora.h), when one targets this layer: modules "lora_A" ([r, in]) and "lora_B"
  // ([out, r]) each holding a "weight", as PEFT names them; null otherwise.
  std::shared_ptr<LoraMatrix> lora_A, lora_B;
  double lora_scaling = 0, lora_dropout = 0;
  // QLoRA (four_bit.h): the weight in 4 bits, as frozen byte parameters "weight_codes",
  // "weight_absmax" (the fp32 scales' bytes, or their 8-bit codes when double-quantized) and
  // "weight_absmax2" (the second-level fp32 scales' bytes) in place of "weight", which is then
  // undefined. Bytes, so that a cast of the model to its training dtype leaves them alone.
  at::Tensor weight_codes, weight_absmax, weight_absmax2;
  std::vector<int64_t> four_bit_shape;
  int four_bit_type = 0;
  bool four_bit_double_quant = false;
  float four_bit_offset = 0;
  // Replaces the weight by its 4-bit codes (type: four_bit.h's FourBitType).
  void quantize_to_4bit(int type, bool double_quant);
  // x·Wᵀ + b, plus the adapter's lora_B(lora_A(dropout(x)))·scaling when there is one.
  at::Tensor forward(const at::Tensor& x);
};

// cos and sin of the rotary embedding for positions 0..T-1 (fp32, computed once per T).
class RotaryTables {
 public:
  explicit RotaryTables(const LlamaConfig& config);
  // [seq, head_dim] in `dtype` on `device` (computed in fp32 on the CPU, converted once).
  std::pair<at::Tensor, at::Tensor> cos_sin(int64_t seq, at::ScalarType dtype, at::Device device = at::kCPU);
  const at::Tensor& inv_freq() const { return inv_freq_; }

 private:
  at::Tensor inv_freq_, cos_, sin_;
  at::Tensor cos_cast_, sin_cast_;  // the last conversion asked for: every layer asks for the same
};

struct LlamaAttention : torch::nn::Module {
  LlamaAttention(const LlamaConfig& c, WeightSource& source, const std::vector<HfTensor>& tensors, int layer,
                 at::ScalarType dtype, const TensorParallelPlace& place);
  std::shared_ptr<Weights> q_proj, k_proj, v_proj, o_proj;
};

// SwiGLU: down(silu(gate(x)) · up(x)) — a layer's MLP, or one expert of a MoE layer (whose
// projections Mixtral names w1, w3, w2).
struct LlamaMlp : torch::nn::Module {
  LlamaMlp(WeightSource& source, const std::vector<HfTensor>& tensors, const std::string& prefix, at::ScalarType dtype,
           const TensorParallelPlace& place = {},
           const std::vector<std::string>& names = {"gate_proj", "up_proj", "down_proj"});
  at::Tensor forward(const at::Tensor& x);  // whole (no tensor parallelism)
  std::shared_ptr<Weights> gate_proj, up_proj, down_proj;
};

struct SparseMoeBlock;  // llama_moe.h
class LoadBalance;     // llama_moe.h: the load-balancing loss of a forward's MoE layers

struct LlamaDecoderLayer : torch::nn::Module {
  // `load_balance`: where a MoE layer records its routing when the loss needs it (else null).
  LlamaDecoderLayer(const LlamaConfig& config, std::shared_ptr<RotaryTables> rope, WeightSource& source,
                    const std::vector<HfTensor>& tensors, int layer, at::ScalarType dtype,
                    const TensorParallelPlace& place = {}, std::shared_ptr<LoadBalance> load_balance = nullptr,
                    const ExpertPlace& experts = {});
  at::Tensor forward(const at::Tensor& x);

  const LlamaConfig& config;
  std::shared_ptr<RotaryTables> rope;
  TensorParallelPlace place;
  int64_t heads = 0, kv_heads = 0;  // this rank's (all of them without tensor parallelism)
  std::shared_ptr<Weights> input_layernorm, post_attention_layernorm;
  std::shared_ptr<LlamaAttention> self_attn;
  std::shared_ptr<LlamaMlp> mlp;         // a dense layer's
  std::shared_ptr<SparseMoeBlock> moe;   // a MoE layer's (registered as the family names it)
};

struct LlamaModel : torch::nn::Module {
  LlamaModel(const LlamaConfig& config, WeightSource& source, at::ScalarType dtype, const TensorParallelPlace& place,
             const PipelinePlace& stage = {}, std::shared_ptr<LoadBalance> load_balance = nullptr,
             const ExpertPlace& experts = {});
  std::shared_ptr<Weights> embed_tokens, norm;  // null on the stages that do not hold them
  std::shared_ptr<torch::nn::Module> layer_list;  // registered as "layers": "0", "1", ...
  std::vector<std::shared_ptr<zero::Unit<LlamaDecoderLayer>>> layers;
};

struct LlamaForCausalLM : torch::nn::Module {
  // Built in `dtype` (the training dtype: no second copy when the engine takes it). Inside a
  // zero::Init scope each decoder layer is partitioned as soon as it is built.
  // With tensor parallelism (`place.group`), each rank builds its slices only; throws naming the
  // numbers when the heads do not split evenly.
  LlamaForCausalLM(LlamaConfig config, WeightSource& source, at::ScalarType dtype = at::kFloat,
                   const TensorParallelPlace& place = {}, const PipelinePlace& stage = {},
                   const ExpertPlace& experts = {});
  // tokens [B, T] (int64, T <= max_position_embeddings) → logits [B, T, V] (fp32 under fp16).
  // Not under tensor parallelism (the loss never gathers the whole vocabulary's logits).
  at::Tensor forward(const at::Tensor& tokens);
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets);
  // The cross-entropy summed over targets that are not -100 (ignored as transformers' labels).
  at::Tensor loss_sum(const at::Tensor& tokens, const at::Tensor& targets);
  // The lm_head weight: its own, or the embedding (or its copy on a last stage) when tied.
  const at::Tensor& output_weight() const;
  // Pipeline parallelism: micro-batch `tokens` (and `targets`) through this stage — from the tokens
  // on the first stage, from the previous stage's activation `received` on the others; returns the
  // activation for the next stage ([B, T, hidden], T/TP under sequence parallelism), or on the
  // last stage the loss (the mean over the targets, or with `mean` false their sum).
  at::Tensor stage_forward(const at::Tensor& tokens, const at::Tensor& targets, const at::Tensor& received, bool mean);

  LlamaConfig config;
  TensorParallelPlace place;
  int64_t vocab_start = 0;  // the first token of this rank's slice of the vocabulary
  std::shared_ptr<LlamaModel> model;
  std::shared_ptr<Weights> lm_head;  // null when tied (and on stages before the last)
  PipelinePlace stage;
  std::shared_ptr<Weights> tied_copy;  // a tied lm_head on a last stage that is not the first (not registered)
  int64_t checkpoint_every = 0;      // activation checkpointing, as the GPT's
  // The checkpointed block inputs kept split over the tensor-parallel group (DeepSpeed's
  // partition_activations). Under sequence parallelism they are split along the sequence already.
  bool partition_activations = false;
  // The load-balancing loss of the forward under way, when the loss adds it
  // (config.moe.output_router_logits); null otherwise.
  std::shared_ptr<LoadBalance> load_balance;

 private:
  at::Tensor hidden(const at::Tensor& tokens);  // the final norm's output [B, T, hidden] (T/size: sequence-parallel)
  at::Tensor embed(const at::Tensor& tokens);   // the residual stream entering the first layer
  at::Tensor blocks(const at::Tensor& x);       // through this stage's decoder layers
  at::Tensor final_norm(const at::Tensor& x);
  at::Tensor head_loss(const at::Tensor& h, const at::Tensor& targets, bool mean);  // from the final norm's output
  at::Tensor head_input(const at::Tensor& tokens);  // under tensor parallelism
};

}  // namespace zero::llama
