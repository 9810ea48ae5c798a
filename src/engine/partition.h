// Partition — everything this rank owns of the model's buckets, in one object: the fp32 master
// weights, the optimizer's moments over them, the gradient accumulator (stages 2/3), and the way
// back to the parameters. Bucket b's part of each lives at [owned_offset, owned_offset + shard)
// of the flat owned buffers (layout/bucket_layout.h), so one offset addresses all of them.
//
// The verbs come in pairs around the optimizer step, in the spirit of Megatron's
// param-and-grad buffer: the buckets fill gradient_accumulator() during backward (grad sync,
// bucket.h); step() applies the optimizer tile by tile (sub_group_size); sync_parameters()
// copies each owned master shard into the model's dtype and all-gathers the buckets (param
// sync). homes() says where each state is stored; the step reaches states only through this class,
// so moving one of them (ZeRO-Offload, docs/engine.md "Not built yet") changes this class and
// not the engine.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/flat_params.h"
#include "engine/gradient_swap.h"
#include "engine/bucket.h"
#include "engine/optimizer_swap.h"
#include "optim/flat_optimizer.h"
#include "zero/communicator.h"
#include "zero/config.h"
#include "zero/engine.h"  // ParamGroup

namespace zero::engine {

// Where a state's bytes are: host memory, or a swap file on NVMe (streamed through buffers).
enum class Memory { kHost, kNvme };
struct StateHomes {
  Memory parameters = Memory::kHost, master = Memory::kHost, moments = Memory::kHost, gradients = Memory::kHost;
};

class Partition {
 public:
  // `owned_shards`: which shard of every bucket this rank owns (0 with one partition: all of it),
  // per replica group of the layout (expert parallelism: the dense buckets', the experts').
  // `accumulate_gradients`: stages 2/3 keep an fp32 accumulator of the owned gradients here.
  // `swap`: the master and the optimizer states go to NVMe (offload_optimizer.device "nvme"), and
  // with them the accumulated gradients.
  // `state_device`: where the master, the moments and the accumulator live and the optimizer
  // steps: the parameters' device, or the host (ZeRO-Offload: offload_optimizer.device "cpu",
  // DeepSpeed's CPU Adam over pinned host states) when the parameters are on a GPU.
  Partition(FlatParams& flat, Communicator& comm, std::vector<int> owned_shards, bool accumulate_gradients,
            std::optional<SwapOptions> swap = std::nullopt, at::Device state_device = at::kCPU);
  ~Partition();

  // Once the parameters are final (after stage 3 took its shards): the fp32 master from each
  // bucket's owned parameters (on NVMe: written by make_optimizer, tile by tile, never whole in
  // memory). The buckets are where the step's results go back (write_owned, sync_parameters).
  void make_master(BucketGroup& group);
  // Then the optimizer over it: DeepSpeed's sub_group_size tiles (at most kLargestTile
  // elements), parameter groups' decay.
  void make_optimizer(const OptimizerConfig& config, const std::vector<ParamGroup>& groups, int64_t sub_group_size,
                      int world_rank);
  // The largest tile the step takes, in elements. With the optimizer on NVMe each swap buffer
  // holds one tile's master, states and gradients, so this sizes the pool, whatever the
  // partition's size: DeepSpeed's default sub_group_size (1e9) would otherwise make one buffer
  // the whole partition (a 201 M GPT on one rank peaked at 4.70 GB resident for 3.6 GB of state
  // on NVMe). 4 Mi elements keep each tile's I/O in 16 MiB reads per state. The same tiles with
  // the optimizer in memory: the norm sums tile by tile, so both give the same bits.
  static constexpr int64_t kLargestTile = int64_t{1} << 22;
  int64_t largest_tile() const;

  // The part of parameter `param` this rank owns, if any.
  std::optional<layout::Fragment> owned_fragment(int param) const {
    return flat_.layout().owned_fragment(param, owned_shards_);
  }
  at::Device state_device() const { return state_device_; }
  const StateHomes& homes() const { return homes_; }
  // Stages 2/3: the reducer's destination: an fp32 accumulator of owned_numel elements, or the
  // swap file (GradientSwap) when the optimizer is on NVMe. Empty below stage 2.
  GradientHome gradient_home();
  const at::Tensor& gradient_accumulator() const { return gradients_; }
  const at::Tensor& master() const { return master_; }
  at::Tensor master(int b) const;  // bucket b's owned slice of it
  // The named fp32 states a checkpoint saves and loads: "master", then the optimizer's (tensors
  // undefined when they are on NVMe: use write_state / read_state).
  std::vector<std::pair<std::string, at::Tensor>> states() const;
  std::vector<std::string> state_names() const;
  // State k of state_names(), all owned_numel elements in order, as pieces of bytes to `sink`
  // (checkpoint save), wherever the state lives.
  void write_state(int k, const std::function<void(const void* data, int64_t bytes)>& sink);
  // fill(offset, length, out): write elements [offset, offset + length) of state k into `out`
  // (checkpoint load), in pieces that cover the owned buffer.
  void read_state(int k, const std::function<void(int64_t offset, int64_t length, float* out)>& fill);
  // The owned shards in the model's dtype: the master rounded (checkpoints of 16-bit models).
  at::Tensor parameters16() const;

  // The local sum of squares of `grads` (owned, fp32), bucket shard by bucket shard; not finite
  // exactly when some gradient is not. `grads` undefined: those on NVMe.
  double sum_of_squares(const at::Tensor& grads) const;
  // The part of that sum from the fragments of `params` (indices into the layout) this rank owns.
  double sum_of_squares_of(const at::Tensor& grads, const std::vector<int>& params) const;
  void step(const at::Tensor& grads, const optim::StepParams& params);
  // Whether step_from can take these owned gradients (BucketGroup::owned_gradient_views): the
  // parameters, the master and the optimizer in host memory, the master apart from the
  // parameters, an element-wise optimizer, and the views fp32 or bf16.
  bool steps_from(const std::vector<at::Tensor>& views) const;
  // sum_of_squares of the views (the same bits: the same buckets, the same kernel's order).
  double sum_of_squares(const std::vector<at::Tensor>& views) const;
  // The step of step(), a cache-sized slice at a time from the gradients where they are: each
  // slice's gradients widened to fp32 (bf16), the optimizer, and the slice's master written into
  // the parameters while it is in cache. No fp32 copy of all the gradients and no second pass
  // over the master (sync_parameters then only gathers). The same bits as step() and
  // sync_parameters(): the optimizer is element-wise and the copy the same rounding.
  void step_from(const std::vector<at::Tensor>& views, const optim::StepParams& params);
  // The master into the parameters: each bucket's owned shard in the model's dtype, then every
  // rank's shards to every rank (stage 3: into the persistent shard; a unit gathers it when it
  // runs). Bucket by bucket: Bucket::write_owned, Bucket::sync_parameters.
  // `master_changed` (after a checkpoint load): the master is new everywhere, not only where the
  // last step wrote it into the parameters (which matters on NVMe, where the step copies tiles).
  void sync_parameters(bool master_changed = false);
  // GatheredParameters wrote whole bucket b: this rank's shard of it becomes its master (and, at
  // stage 3, its persistent shard).
  void take_parameters(int b);

  int64_t master_bytes() const;  // what MemoryReport::master_weights counts
  int64_t state_bytes() const { return optimizer_->state_bytes(); }
  // Bucket b's part of the two above (its owned shard's).
  int64_t master_bytes_of(int b) const;
  int64_t state_bytes_of(int b) const;
  bool swapped() const { return swap_ != nullptr; }
  int64_t swap_buffer_bytes() const {
    return (swap_ ? swap_->buffer_bytes() : 0) + (stream_ ? stream_->buffer_bytes() : 0);
  }
  int64_t swap_bytes_read() const { return swap_ ? swap_->bytes_read() : 0; }
  int64_t swap_bytes_written() const { return swap_ ? swap_->bytes_written() : 0; }
  int64_t swap_file_bytes() const { return swap_ ? swap_->file_bytes() : 0; }
  // Why the swap file is not O_DIRECT (a filesystem that refuses it), or empty.
  std::string swap_warning() const { return swap_ ? swap_->warning() : std::string(); }
  int64_t gradient_bytes() const { return gradients_.defined() ? static_cast<int64_t>(gradients_.nbytes()) : 0; }

 private:
  // fn(bucket, begin, end) for each bucket's part [begin, end) of tile t (owned offsets).
  void for_each_bucket_in(optim::Tile t, const std::function<void(int, int64_t, int64_t)>& fn) const;
  // NVMe: an updated master tile into the parameters this rank owns, bucket by bucket
  // (sync_parameters then only gathers).
  void copy_into_parameters(optim::Tile t, const at::Tensor& master_tile);
  FlatParams& flat_;
  Communicator& comm_;
  std::vector<int> owned_shards_;  // per replica group
  at::Device state_device_;
  BucketGroup* buckets_ = nullptr;  // from make_master
  StateHomes homes_;
  at::Tensor gradients_;  // stages 2/3
  at::Tensor master_;     // fp32, the owned shards of every bucket, bucket after bucket
  bool master_is_params_ = false;  // fp32 model, one partition: the master is flat.whole()
  bool master_is_shards_ = false;  // fp32 model, stage 3: the units' shards view the master
  std::unique_ptr<optim::FlatOptimizer> optimizer_;
  std::vector<optim::Tile> tiles_;  // the step's slices of the owned buffer (sub_group_size)
  std::optional<SwapOptions> swap_options_;
  std::unique_ptr<OptimizerSwap> swap_;
  bool gradients_on_nvme_ = false;
  std::unique_ptr<GradientSwap> stream_;  // the gradients into swap_ (created with it)
  bool parameters_written_ = false;       // step_from wrote the master into the parameters
};

}  // namespace zero::engine
