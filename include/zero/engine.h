// zero::Engine — trains a LibTorch module data-parallel with ZeRO stages 0, 1, 2 and 3.
//
//   zero::World world = zero::World::from_environment();
//   zero::Config config = zero::Config::from_file("ds.json", {.world_size = world.size()});
//   zero::Engine engine(*model, config, world);
//   for (...) {
//     at::Tensor loss = engine.forward([&] { return model->loss(x, y); });
//     engine.backward(loss);
//     engine.step();  // applies on the gradient-accumulation boundary, a no-op before it
//   }
//
// What the engine does (docs/engine.md): trainable parameters become views into flat buckets
// (reduce_bucket_size elements, padded to world_size × alignment); rank r owns shard r of every
// bucket, and keeps the fp32 master weights and optimizer state only for its shards (stages 1, 2).
// Gradients: stage 0 all-reduces on the boundary; stage 1 reduce-scatters on the boundary; stage 2
// reduce-scatters every micro-step into an fp32 accumulator of its shards, and frees each
// parameter's gradient as soon as it is copied into its bucket. After the optimizer step, the
// updated shards are all-gathered back into every rank's parameters. Stage 3 (docs/stage3.md)
// reduces as stage 2 but keeps only shards of each zero::Unit's parameters, gathering a unit
// around its forward and backward.
//
// The model's trainable parameters must share one dtype; with "bf16" or "fp16" enabled the engine
// casts the module to it (as DeepSpeed does), and inputs must match. Initial weights are
// broadcast from rank 0.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "zero/comm_stats.h"
#include "zero/config.h"
#include "zero/world.h"

namespace torch::nn {
class Module;
}

namespace zero {

// Bytes this rank holds for model state, by category (padding included in each).
struct MemoryReport {
  // Frozen parameters (requires_grad false, e.g. a LoRA's base): whole at stages 0-2; stage 3:
  // their shards, the root's whole, and any unit's gathered right now. No gradient, master or
  // optimizer state goes with them.
  int64_t frozen_parameters = 0;
  int64_t parameters = 0;        // 16- or 32-bit parameters: whole (stages 0-2); stage 3: shards,
                                 // the root unit, any unit gathered right now, and
                                 // the spare gather buffers kept for the next gathers
  int64_t gradients = 0;         // stage 0/1: whole, model dtype; stage 2: owned shards, fp32
  int64_t master_weights = 0;    // fp32 master of the owned shards
  int64_t optimizer_state = 0;   // e.g. Adam's m and v for the owned shards
  int64_t buckets = 0;           // stage 2: gradient bucket buffers in the pool
  int64_t padding_elements = 0;  // elements added to align buckets (all ranks together)
  int64_t gathered_peak = 0;     // stage 3: most bytes of unit parameters whole at once so far
  int64_t gather_buffers = 0;    // stage 3: of `parameters`, the spare gather buffers
  // ZeRO++ hpZ: this rank's parts of the units computed with since the last forward began (a
  // unit's padded size / zero_hpz_partition_size each), held until backward is over.
  int64_t secondary_partition = 0;
  // NVMe offload: the buffers master and optimizer states stream through (host memory), and the
  // swap file that holds them (on NVMe, not in memory; not in total()).
  int64_t swap_buffers = 0;
  int64_t on_nvme = 0;
  int64_t total() const {
    return frozen_parameters + parameters + gradients + master_weights + optimizer_state + buckets + swap_buffers +
           secondary_partition;
  }
  // Expert parallelism: of parameters (without stage 3's spare gather buffers), gradients, master
  // weights and optimizer state, the expert buckets' own bytes; the rest is the dense weights'.
  struct Experts {
    int64_t parameters = 0, gradients = 0, master_weights = 0, optimizer_state = 0;
    int64_t total() const { return parameters + gradients + master_weights + optimizer_state; }
  } experts;
};

// NVMe offload (ZeRO-Infinity): bytes moved between host memory and this rank's swap files since
// the engine was built, the initial writes included.
struct SwapTraffic {
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
};

// wall_clock_breakdown: where this rank's time went in its last optimizer step (the step's
// micro-steps summed), in seconds. The collective latencies run from each call until its
// completion is seen, and overlap the compute phases they were launched in.
struct StepBreakdown {
  double forward = 0, backward = 0;
  double backward_inner = 0;   // autograd's backward (the reductions it launches overlap it)
  double backward_reduce = 0;  // the reductions left after autograd finished
  double step = 0;             // the optimizer step: norm, optimizer, parameter all-gather
  double optimizer = 0;        // the optimizer's pass over the owned shards (CPU Adam, ...)
  double optimizer_allgather = 0;
  double all_reduce = 0, reduce_scatter = 0, all_gather = 0;  // collective latencies, summed
  double swap_in = 0, swap_out = 0;  // NVMe offload: time blocked on reads and on writes
  // Mixtures of experts (ModelParallelOptions::expert_step): the MoE layers' forwards split into
  // the router (gate, softmax, top-k), the dispatch (rows sorted by expert and, with expert
  // parallelism, sent to their experts' ranks), the experts' own compute, and the combine (rows
  // back and summed per token); and the expert-parallel exchange's all-to-all latencies, forward
  // and backward. A checkpointed layer's recomputation counts too (it is time the step spends).
  double moe_router = 0, moe_dispatch = 0, moe_experts = 0, moe_combine = 0;
  double expert_all_to_all = 0;
  double wall = 0;                   // the whole step, from the end of the previous one
};

// What a model's MoE layers did since the last call (ModelParallelOptions::expert_step): their
// forwards' seconds by part (StepBreakdown's moe_*), and per MoE layer the (token, expert) pairs
// each of its experts got from this rank's training forwards (the load balance).
struct ExpertStep {
  double router = 0, dispatch = 0, experts = 0, combine = 0;
  struct Layer {
    int64_t layer = 0;            // the decoder layer
    std::vector<int64_t> tokens;  // per expert
  };
  std::vector<Layer> load;
};

// What the model costs per sample, for tokens/s and the flops profiler (Engine::set_model_cost).
struct ModelCost {
  int64_t tokens_per_sample = 0;
  double flops_per_sample = 0;  // forward + backward model FLOPs (without recomputation)
};

// Parameters with their own weight decay (DeepSpeed's optimizer parameter groups), e.g. biases and
// norms with none. Parameters in no group use optimizer.params.weight_decay.
struct ParamGroup {
  std::vector<at::Tensor> params;
  double weight_decay = 0;
};

// Model parallelism beside ZeRO: tensor parallelism (zero/tensor_parallel.h) and pipeline stages
// (zero/pipeline.h). With tensor parallelism the engine's world is the
// data-parallel group, and this names the tensor-parallel group and, for each parameter (by the
// engine's name), the dimension its slices split it along, or -1 for one every member holds whole
// and alike (norms, biases after a row-parallel layer). The gradient norm adds each member's
// slices once and the whole ones once; an fp16 overflow on any member skips the step on all.
// Checkpoints name every slice by its place in the whole parameter, so they load at any
// tensor-parallel size (docs/tensor_parallel.md).
struct ModelParallelOptions {
  World* group = nullptr;  // null (or a group of one): no tensor parallelism
  std::function<int(const std::string& name)> split_dim;
  // The group's collectives as the model's layers make them (ParallelGrid::layer_stats): the comms
  // logger and the Prometheus endpoint count them as the tensor-parallel group's. Null: not counted.
  CommStats* layer_stats = nullptr;
  // Pipeline parallelism (zero/pipeline.h): the ranks of the other stages at this rank's data- and
  // tensor-parallel place (ParallelGrid::pipeline). Each stage holds other parameters, so the
  // gradient norm's squares and the fp16 overflow flag are summed over them too. Null: one stage.
  World* pipeline = nullptr;
  // Expert parallelism (zero/expert_parallel.h, docs/moe.md): the engine's world cut into
  // expert-parallel groups, over which each MoE layer's experts are split, and expert-data-parallel
  // groups (the ranks holding the same experts, one per expert-parallel group). The parameters
  // `is_expert` names are broadcast, reduced and partitioned over `expert_data_parallel`, the others
  // over the world, as DeepSpeed's MoE groups do. Both kinds' gradients are divided by the world's
  // size: each rank's loss is the mean over its own rows, and an expert's gradient on a rank already
  // holds the tokens every member of its expert-parallel group sent it. Null: no expert parallelism.
  World* expert_parallel = nullptr;
  World* expert_data_parallel = nullptr;
  std::function<bool(const std::string& name)> is_expert;
  // The exchange's collectives as the model's MoE layers make them: the comms logger prints them
  // as the expert-parallel group's, wall_clock_breakdown and Prometheus time and count them. Null:
  // not counted.
  CommStats* expert_stats = nullptr;
  // A model with MoE layers (with or without expert parallelism): called once per optimizer step,
  // for wall_clock_breakdown and Prometheus (docs/moe.md). Null: no experts.
  std::function<ExpertStep()> expert_step;
};

// What Engine::load_checkpoint restores (DeepSpeed's load_checkpoint arguments).
struct LoadOptions {
  std::string tag;                    // empty: the tag in DIR/latest
  bool load_optimizer_states = true;  // optimizer state (and its step count)
  bool load_lr_scheduler_states = true;
  bool load_module_only = false;  // weights only: no optimizer, schedule, scaler or counters
  bool strict = true;             // parameter names must match both ways (else: error listing them)
};

class Engine {
 public:
  // `config` must be resolved (Config::from_file or resolve()) for world.size() ranks, and must
  // have an "optimizer" block. The module must outlive the engine.
  // With tensor parallelism, `world` is this rank's data-parallel group.
  Engine(torch::nn::Module& model, const Config& config, World& world, const std::vector<ParamGroup>& groups = {},
         const ModelParallelOptions& tensor_parallel = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Runs `fn` (the model's forward and loss) and returns its result.
  at::Tensor forward(const std::function<at::Tensor()>& fn);
  // Backward of loss × loss_scale / gradient_accumulation_steps, then this micro-step's gradient
  // reductions (stage 2 always, stages 0/1 on the boundary).
  void backward(const at::Tensor& loss);
  // A pipeline stage's backward (zero/pipeline.h): from `outputs` with the gradients the next stage
  // sent back for them (already scaled as the last stage's loss is: by the loss scale and
  // 1/gradient_accumulation_steps), with the reductions backward(loss) makes.
  void backward(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& output_grads);
  // On the accumulation boundary: overflow check (fp16), unscale + clip, optimizer, LR schedule,
  // parameter all-gather. Before it: counts the micro-step and returns.
  void step();

  // Discards the gradients accumulated since the last step.
  void zero_grad();
  // Stage 3 (collective): makes every unit's parameters whole on every rank, to read them (export,
  // evaluation outside the units); each unit's next forward frees them again. No-op at stages 0-2.
  void gather_parameters();

  // DeepSpeed's GatheredParameters: while it lives every parameter is whole on every rank. With a
  // modifier rank, that rank may change the weights in place; on destruction its values are
  // broadcast and become everyone's parameters and fp32 master weights (optimizer state is kept).
  // Creating and destroying it are collective: every rank must do both at the same point (an
  // exception unwinding through it on one rank only leaves the others waiting).
  class GatheredParameters {
   public:
    ~GatheredParameters();
    GatheredParameters(const GatheredParameters&) = delete;
    GatheredParameters& operator=(const GatheredParameters&) = delete;

   private:
    friend class Engine;
    GatheredParameters(Engine& engine, int modifier_rank);
    Engine& engine_;
    int modifier_rank_;
  };
  [[nodiscard]] GatheredParameters gathered_parameters(int modifier_rank = -1);

  // DeepSpeed's save_16bit_model (collective): rank 0 writes every trainable parameter, whole, in
  // the model's dtype, to DIR/FILE as safetensors (no pickle), gathering stage-3 units one at a
  // time (never the whole model at once). At stage 3 only when
  // stage3_gather_16bit_weights_on_model_save is true; otherwise it writes nothing, says so on
  // rank 0, and returns false, as DeepSpeed does.
  bool save_16bit_model(const std::string& dir, const std::string& file = "model.safetensors");

  // Every trainable parameter as the engine names it, with its dtype and shape, in the order
  // visit_whole_parameters visits them (bucket by bucket: a stage-3 unit at a time).
  struct ParameterInfo {
    std::string name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    int64_t bytes = 0;
  };
  std::vector<ParameterInfo> parameter_infos() const;
  // Collective: every rank calls it. Makes one bucket whole at a time (stage 3 gathers a unit and
  // frees it again, so memory follows the largest unit, never the model) and calls
  // fn(index into parameter_infos(), whole parameter) on `on_rank` for each of its parameters,
  // then `finish` there. The first exception on that rank stops its calls; after the last bucket
  // every rank learns of it and throws (named by `what`), so no rank is left waiting.
  void visit_whole_parameters(const std::function<void(size_t, const at::Tensor&)>& fn,
                              const std::function<void()>& finish, int on_rank, const std::string& what);
  // The module's train / eval mode.
  void train();
  void eval();

  // While a NoSync is alive, backward accumulates gradients locally without reducing them, as
  // DeepSpeed's no_sync (stages 0 and 1 only: an error at stage 2, whose gradients exist only as
  // reduced shards). The micro-step before step() must run outside it.
  class NoSync {
   public:
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    friend class Engine;
    explicit NoSync(Engine& engine);
    Engine& engine_;
  };
  [[nodiscard]] NoSync no_sync();

  // Checkpoints (docs/checkpoints.md). Collective: every rank calls them, with the same arguments,
  // on a directory every rank sees. save_checkpoint writes DIR/TAG (default "global_step<N>")
  // atomically, then DIR/latest, and returns the tag; `client_state` is a JSON object stored with
  // it. A checkpoint loads at any world size and stage: fragments are keyed by parameter name and
  // element range. load_checkpoint returns the client state (JSON text); every problem is an error
  // naming the file, and the parameter where there is one.
  std::string save_checkpoint(const std::string& dir, const std::string& tag = "",
                              const std::string& client_state = "{}");
  std::string load_checkpoint(const std::string& dir, const LoadOptions& options = {});

  int64_t global_steps() const;    // applied or skipped optimizer steps
  int64_t global_samples() const;  // global_steps × train_batch_size
  int64_t skipped_steps() const;   // fp16 overflows
  int64_t micro_steps() const;
  bool is_gradient_accumulation_boundary() const;  // true when the next step() applies
  bool was_step_applied() const;                   // the last boundary step updated the weights
  double get_lr() const;                           // the lr of the next optimizer step
  double get_global_grad_norm() const;             // unscaled, before clipping, of the last step
  double loss_scale() const;                       // 1 without fp16
  MemoryReport memory_report() const;
  SwapTraffic swap_traffic() const;
  // Collective calls, bytes and time of this engine's communicator since construction.
  const CommStats& comm_stats() const;
  // wall_clock_breakdown's timers for the last optimizer step (measured whatever the config).
  StepBreakdown last_step_breakdown() const;
  // Tokens and FLOPs per sample: adds tokens/s to the metrics and turns on the flops profiler's
  // FLOP/s and MFU (docs/observability.md).
  void set_model_cost(const ModelCost& cost);
  // The comms logger's table (comms_logger.enabled; empty otherwise), as the engine prints it on
  // rank 0 when it is destroyed.
  std::string comms_summary() const;
  const Config& config() const;
  // Settings of the config this engine accepts but does not act on yet, by key (also printed to
  // stderr by rank 0 at construction).
  const std::vector<std::string>& warnings() const;

 private:
  void apply_step();  // step()'s work on the boundary: overflow check, clip, optimizer, all-gather
  // An error naming `what` when experts are partitioned over their own group (not built yet there).
  void refuse_with_experts(const std::string& what) const;
  // Both backward()s: `autograd_backward` between the buckets' begin and end of a backward.
  void run_backward(const std::function<void()>& autograd_backward);
  // save_checkpoint's work for this engine's data-parallel group, into ROOT/TAG; `slices` is the
  // tensor-parallel block of the manifest (JSON text; empty without tensor parallelism).
  void save_partitions(const std::string& root, const std::string& tag, const std::string& client_state,
                       const std::string& slices);
  // This pipeline stage's (or the whole model's) part of save_checkpoint, into DIR.
  void save_stage(const std::string& dir, const std::string& tag, const std::string& client_state);
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace zero
