// Optimizers over one flat fp32 buffer: the fp32 master slice a rank owns. The engine hands each
// step the matching fp32 gradient slice (already unscaled and clipped) and the hyper-parameters
// of this step (lr and betas can change every step: schedules, OneCycle momentum).
//
// Formulas are DeepSpeed's (docs/config.md), element-wise, so the result does not depend on how the
// buffer is partitioned — the property ZeRO's equivalence rests on.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "zero/config.h"

namespace zero::optim {

struct StepParams {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  int64_t step = 1;  // 1-based count of applied steps, for bias correction
  // The gradients are multiplied by this first (the engine's average, unscale and clip in one
  // factor): Adam folds it into its one pass, the others scale each tile before their update.
  double grad_scale = 1.0;
};

// A run of the flat buffer sharing one weight decay (parameter groups). Runs cover the buffer in
// order; an empty list means the config's weight_decay everywhere.
struct DecayRun {
  int64_t offset = 0, length = 0;
  double weight_decay = 0;
};

// Where each parameter's elements sit in this rank's buffer, for optimizers that need whole-
// parameter norms (Lamb): a parameter cut between ranks has fragments on several of them.
struct ParamFragments {
  struct Fragment {
    int64_t offset = 0, length = 0;
    int param = 0;
  };
  int num_params = 0;
  std::vector<Fragment> fragments;                        // this rank's
  std::function<void(const at::Tensor&)> sum_over_ranks;  // in place, float64 [num_params, 2]
};

// A slice [offset, offset + length) of the flat buffer.
struct Tile {
  int64_t offset = 0, length = 0;
};

// [0, numel) cut into slices of at most `tile` elements.
std::vector<Tile> tiles_of(int64_t numel, int64_t tile);
// [0, numel) cut at every fragment's ends: one tile per parameter fragment, and one per gap
// (padding) between them. DeepSpeed's sub_group_size 0: every parameter its own sub-group.
std::vector<Tile> tiles_per_parameter(int64_t numel, const std::vector<ParamFragments::Fragment>& fragments);

class FlatOptimizer {
 public:
  // `tile`: the step runs over the buffer in slices of at most this many elements (DeepSpeed's
  // sub_group_size), so its temporaries are a few slices, not a few buffers. Every formula is
  // element-wise: the result does not depend on the tile.
  FlatOptimizer(std::vector<DecayRun> runs, int64_t tile) : runs_(std::move(runs)), tile_(tile) {}
  virtual ~FlatOptimizer() = default;
  // Steps over exactly these tiles (covering the buffer in order) instead of `tile`-sized ones.
  void use_tiles(std::vector<Tile> tiles) { tiles_ = std::move(tiles); }
  // params and grads: contiguous fp32 of the same size (the size given at construction).
  virtual void step(const at::Tensor& params, const at::Tensor& grads, const StepParams& p);
  // Whether every formula is element-wise, so that any cut of the buffer steps to the same bits
  // (Lamb's trust ratio is per whole parameter: it is not).
  virtual bool elementwise() const { return true; }
  // An element-wise optimizer's step over slice t alone (params and grads: t's), with the states
  // held here: step() over any cut into slices gives the same bits. The engine steps 16-bit
  // models a cache-sized slice at a time (Partition::step_from).
  void step_slice(const at::Tensor& params, const at::Tensor& grads, const StepParams& p, Tile t);
  // Named state tensors (checkpoints, memory reports); empty tensors when streamed.
  virtual std::vector<std::pair<std::string, at::Tensor>> state() const = 0;
  int64_t state_bytes() const;
  // Streamed states (NVMe offload): one step of tile t, with each state's values for that tile
  // given in state() order; params and grads are the tile's. The same arithmetic as step().
  void step_tile_with(const at::Tensor& params, const at::Tensor& grads, const std::vector<at::Tensor>& states,
                      const StepParams& p, Tile t);

 protected:
  // One tile: `params` and `grads` are already narrowed to it; state tensors are narrowed with t.
  // Unless fuses_grad_scale(), `grads` was already multiplied by p.grad_scale.
  virtual void step_tile(const at::Tensor& params, const at::Tensor& grads, const StepParams& p, Tile t) = 0;
  virtual bool fuses_grad_scale() const { return false; }
  // State k (of state()) over tile t: a slice of `whole`, or the tile given to step_tile_with.
  at::Tensor state_slice(const at::Tensor& whole, int k, Tile t) const {
    return window_.empty() ? whole.narrow(0, t.offset, t.length) : window_[static_cast<size_t>(k)];
  }
  std::vector<Tile> tiles(int64_t numel) const { return tiles_.empty() ? tiles_of(numel, tile_) : tiles_; }
  // fn(begin, length, weight_decay) for consecutive pieces covering tile t, relative to it (a
  // piece outside every run, e.g. padding, has weight decay 0).
  template <class Fn>
  void for_decay_pieces_in(Tile t, Fn&& fn) const;
  // grads + wd * params, run by run (L2 decay: Adam, Adagrad, SGD); `grads` itself when all wd
  // are 0. Both are tile t.
  at::Tensor with_l2(const at::Tensor& grads, const at::Tensor& params, Tile t) const;

 private:
  // The part of each decay run inside tile t, relative to the tile.
  template <class Fn>
  void for_runs_in(Tile t, Fn&& fn) const;
  std::vector<DecayRun> runs_;
  int64_t tile_;
  std::vector<Tile> tiles_;  // when set: use_tiles
  std::vector<at::Tensor> window_;  // step_tile_with's states, during its step
};

// Adam/AdamW (DeepSpeedCPUAdam too), Adagrad, Lion, SGD, Lamb. `runs`: per-run weight decay
// (parameter groups); empty: config.weight_decay for all. Lamb needs `fragments`; without them it
// treats the whole buffer as one parameter. `tile`: see FlatOptimizer. `device`: where the states
// live and the step runs: the CPU kernels (cpu_kernels.h) on the CPU, the same formulas in tensor
// operations on any other device.
std::unique_ptr<FlatOptimizer> make_flat_optimizer(const OptimizerConfig& config, int64_t numel,
                                                   std::vector<DecayRun> runs = {}, ParamFragments fragments = {},
                                                   int64_t tile = INT64_MAX, bool streamed = false,
                                                   at::Device device = at::kCPU);

}  // namespace zero::optim
