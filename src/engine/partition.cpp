#include "engine/partition.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <unordered_map>

#include "optim/cpu_kernels.h"
#include "zero/allocator.h"
#include "zero/error.h"

namespace zero::engine {
namespace {

// The weight decay of every owned element, as runs over the owned buffer (parameter groups).
std::vector<optim::DecayRun> decay_runs(const FlatParams& flat, const std::vector<int>& owned_shards,
                                        const std::vector<ParamGroup>& groups,
                                        double default_decay, int rank) {
  std::unordered_map<const void*, double> decay_of;
  for (const ParamGroup& g : groups) {
    for (const auto& p : g.params) {
      if (!decay_of.emplace(p.unsafeGetTensorImpl(), g.weight_decay).second) {
        throw Error("a parameter is in two parameter groups", "param_groups", rank);
      }
    }
  }
  const layout::BucketLayout& layout = flat.layout();
  std::vector<optim::DecayRun> runs;
  for (size_t i = 0; i < flat.params().size(); ++i) {
    auto fragment = layout.owned_fragment(static_cast<int>(i), owned_shards);
    if (!fragment) continue;
    auto found = decay_of.find(flat.params()[i].unsafeGetTensorImpl());
    runs.push_back({fragment->owned_offset, fragment->param_end - fragment->param_begin,
                    found == decay_of.end() ? default_decay : found->second});
  }
  if (decay_of.size() > 0) {
    size_t matched = 0;
    for (const auto& p : flat.params()) matched += decay_of.count(p.unsafeGetTensorImpl());
    if (matched != decay_of.size()) {
      throw Error("a parameter group lists a tensor that is not a trainable parameter of the model", "param_groups",
                  rank);
    }
  }
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
  std::vector<optim::DecayRun> merged;  // adjacent runs with the same decay become one
  for (const auto& r : runs) {
    if (!merged.empty() && merged.back().offset + merged.back().length == r.offset &&
        merged.back().weight_decay == r.weight_decay) {
      merged.back().length += r.length;
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

}  // namespace

Partition::Partition(FlatParams& flat, Communicator& comm, std::vector<int> owned_shards, bool accumulate_gradients,
                     std::optional<SwapOptions> swap, at::Device state_device)
    : flat_(flat),
      comm_(comm),
      owned_shards_(std::move(owned_shards)),
      state_device_(state_device),
      swap_options_(std::move(swap)) {
  if (swap_options_) homes_.master = homes_.moments = Memory::kNvme;
  if (accumulate_gradients && swap_options_) {
    gradients_on_nvme_ = true;  // in the optimizer's swap file, which make_optimizer creates
    homes_.gradients = Memory::kNvme;
  } else if (accumulate_gradients) {
    gradients_ = at::zeros({flat.layout().owned_numel()}, at::TensorOptions(at::kFloat).device(state_device_));
  }
}

GradientHome Partition::gradient_home() {
  GradientHome home;
  if (!gradients_on_nvme_) {
    home.memory = gradients_;
    return home;
  }
  home.put = [this](int64_t offset, const at::Tensor& shard, bool replace) {
    if (!stream_) throw Error("internal: gradients arrived before the optimizer's swap file exists");
    stream_->put(offset, shard, replace);
  };
  return home;
}

Partition::~Partition() = default;

void Partition::make_master(BucketGroup& group) {
  buckets_ = &group;
  // On NVMe the master is written out tile by tile (make_optimizer), never whole in memory.
  if (swap_options_) return;
  const bool same_device = state_device_ == flat_.device();
  if (!flat_.layout().partitioned() && flat_.dtype() == at::kFloat && flat_.whole().defined() && same_device) {
    // One partition of an fp32 model: the owned buffer is the parameters themselves, so the
    // optimizer steps them in place (as DDP and DeepSpeed's stage 0 do): no second fp32 copy.
    master_ = flat_.whole();
    master_is_params_ = true;
    return;
  }
  std::vector<at::Tensor> shards;
  for (int b = 0; b < buckets_->size(); ++b) shards.push_back(buckets_->bucket(b).owned_parameters());
  master_ = at::cat(shards).to(state_device_, at::kFloat);
  if (buckets_->sharded() && flat_.dtype() == at::kFloat && !swap_options_ && !buckets_->shards_swapped() &&
      same_device) {
    // Stage 3, fp32: each unit's persistent shard is its part of the master, not a copy of it
    // (one fp32 copy of the owned parameters less per rank).
    for (int b = 0; b < buckets_->size(); ++b) {
      Bucket& bucket = buckets_->bucket(b);
      if (!bucket.persistent()) bucket.own_view(master(b));
    }
    master_is_shards_ = true;
  }
}

void Partition::make_optimizer(const OptimizerConfig& config, const std::vector<ParamGroup>& groups,
                               int64_t sub_group_size, int world_rank) {
  // Note: padding elements fall in no run; their master is 0 and stays 0 under any decay anyway.
  // Lamb needs whole-parameter norms: each rank sums its fragments, then the sums are added up.
  optim::ParamFragments fragments;
  fragments.num_params = static_cast<int>(flat_.params().size());
  for (int i = 0; i < fragments.num_params; ++i) {
    if (auto f = owned_fragment(i)) {
      fragments.fragments.push_back({f->owned_offset, f->param_end - f->param_begin, i});
    }
  }
  // The model's own parameter tensors (stages 0-2) or zero::Init's shards (stage 3, fp32) were
  // copied into the master and freed, leaving holes no buffer of that size fits: their pages go
  // back before the optimizer state is allocated, so they never add to the peak (docs/PERFORMANCE.md, "Peak RSS and system time").
  release_freed_memory();
  // sub_group_size 0 is DeepSpeed's too: every parameter its own sub-group.
  const int64_t owned = flat_.layout().owned_numel();
  const int64_t tile = std::min(sub_group_size, kLargestTile);
  tiles_ = sub_group_size == 0 ? optim::tiles_per_parameter(owned, fragments.fragments) : optim::tiles_of(owned, tile);
  // (Lamb with expert parallelism is refused: the sums would add different experts.)
  if (flat_.layout().world_size() > 1) {
    fragments.sum_over_ranks = [&comm = comm_](const at::Tensor& sums) {
      comm.all_reduce(sums, ReduceOp::kSum, {.async = false});
    };
  }
  optimizer_ = optim::make_flat_optimizer(
      config, owned, decay_runs(flat_, owned_shards_, groups, config.weight_decay, world_rank),
      std::move(fragments), std::max<int64_t>(1, tile), swap_options_.has_value(), state_device_);
  optimizer_->use_tiles(tiles_);
  if (swap_options_) {
    swap_ = std::make_unique<OptimizerSwap>(*swap_options_, tiles_, static_cast<int>(optimizer_->state().size()),
                                            gradients_on_nvme_);
    // The master from the owned parameter shards, one tile at a time (a shard read from NVMe at
    // stage 3 is read once, not once per tile).
    int cached = -1;
    at::Tensor shard;
    swap_->write_initial([&](optim::Tile t, const at::Tensor& out) {
      for_each_bucket_in(t, [&](int b, int64_t begin, int64_t end) {
        if (cached != b) shard = buckets_->bucket(cached = b).owned_parameters();
        const int64_t base = flat_.layout().buckets()[static_cast<size_t>(b)].owned_offset;
        out.narrow(0, begin - t.offset, end - begin).copy_(shard.narrow(0, begin - base, end - begin));
      });
    });
    shard = at::Tensor();
    // One write fills the aio queue.
    if (gradients_on_nvme_)
      stream_ = std::make_unique<GradientSwap>(*swap_, swap_options_->aio.block_size * swap_options_->aio.queue_depth);
    release_freed_memory();
  }
}

int64_t Partition::largest_tile() const {
  int64_t largest = 0;
  for (const optim::Tile& t : tiles_) largest = std::max(largest, t.length);
  return largest;
}

at::Tensor Partition::master(int b) const {
  const auto& bucket = flat_.layout().buckets()[static_cast<size_t>(b)];
  return master_.narrow(0, bucket.owned_offset, bucket.shard);
}

std::vector<std::pair<std::string, at::Tensor>> Partition::states() const {
  std::vector<std::pair<std::string, at::Tensor>> kinds = {{"master", master_}};
  for (auto& entry : optimizer_->state()) kinds.push_back(entry);
  return kinds;
}

std::vector<std::string> Partition::state_names() const {
  std::vector<std::string> names = {"master"};
  for (const auto& entry : optimizer_->state()) names.push_back(entry.first);
  return names;
}

void Partition::write_state(int k, const std::function<void(const void* data, int64_t bytes)>& sink) {
  if (!swap_) {
    const at::Tensor t = states()[static_cast<size_t>(k)].second.cpu();  // (on a GPU: a host copy)
    sink(t.data_ptr(), static_cast<int64_t>(t.nbytes()));
    return;
  }
  swap_->read_state(k, [&](optim::Tile t, const float* values) { sink(values, 4 * t.length); });
}

void Partition::read_state(int k, const std::function<void(int64_t offset, int64_t length, float* out)>& fill) {
  if (!swap_) {
    const at::Tensor state = states()[static_cast<size_t>(k)].second;  // (states() is a temporary)
    const at::Tensor t = state.is_cpu() ? state : at::empty(state.sizes(), state.options().device(at::kCPU));
    fill(0, t.numel(), t.data_ptr<float>());
    if (!state.is_cpu()) state.copy_(t);
    return;
  }
  swap_->update_state(k, [&](optim::Tile t, float* values) { fill(t.offset, t.length, values); });
}

at::Tensor Partition::parameters16() const {
  if (!swap_) return master_.to(flat_.dtype());
  // On NVMe: the parameters' own owned shards, which the last step (or load) set from the master.
  std::vector<at::Tensor> shards;
  for (size_t i = 0; i < flat_.layout().buckets().size(); ++i)
    shards.push_back(buckets_->bucket(static_cast<int>(i)).owned_parameters());
  return at::cat(shards);
}

double Partition::sum_of_squares(const at::Tensor& grads) const {
  if (stream_) return stream_->sum_of_squares();  // summed as the pieces went to NVMe, in this grouping
  // On a GPU: one reduction accumulated in fp64 (padding elements are zero and add nothing), one
  // sync, and one fp32 temporary rather than an fp64 copy of every gradient.
  if (!grads.is_cpu()) return grads.square().sum(at::kDouble).item<double>();
  // One fused pass per bucket shard (no temporaries); padding elements are zero and add nothing.
  double sum = 0;
  for (const auto& bucket : flat_.layout().buckets())
    sum += optim::sum_of_squares(grads.data_ptr<float>() + bucket.owned_offset, bucket.shard);
  return sum;
}

double Partition::sum_of_squares_of(const at::Tensor& grads, const std::vector<int>& params) const {
  if (params.empty()) return 0;
  if (!grads.defined()) throw Error("gradients on NVMe with tensor parallelism are not supported yet", "offload_optimizer");
  double sum = 0;
  for (int p : params) {
    if (const auto f = owned_fragment(p)) {
      sum += grads.narrow(0, f->owned_offset, f->param_end - f->param_begin).to(at::kDouble).square().sum().item<double>();
    }
  }
  return sum;
}

void Partition::step(const at::Tensor& grads, const optim::StepParams& params) {
  if (!swap_) {
    optimizer_->step(master_, grads, params);
    return;
  }
  // Tile by tile through the swap buffers: the same arithmetic as the step above.
  swap_->for_each_tile([&](optim::Tile t, const TileViews& v) {
    optimizer_->step_tile_with(v.master, stream_ ? v.gradients : grads.narrow(0, t.offset, t.length), v.states, params,
                               t);
    copy_into_parameters(t, v.master);
  });
}

bool Partition::steps_from(const std::vector<at::Tensor>& views) const {
  // (Parameters on a GPU with the optimizer on the host: each slice would be its own transfer.)
  if (swap_ || stream_ || master_is_params_ || master_is_shards_ || !state_device_.is_cpu() ||
      !flat_.device().is_cpu() || !optimizer_->elementwise() || views.size() != flat_.layout().buckets().size())
    return false;
  return std::all_of(views.begin(), views.end(), [](const at::Tensor& v) {
    return v.is_cpu() && v.is_contiguous() && (v.scalar_type() == at::kFloat || v.scalar_type() == at::kBFloat16);
  });
}

double Partition::sum_of_squares(const std::vector<at::Tensor>& views) const {
  double sum = 0;
  for (const at::Tensor& v : views) {
    sum += v.scalar_type() == at::kFloat
               ? optim::sum_of_squares(v.data_ptr<float>(), v.numel())
               : optim::sum_of_squares_bf16(reinterpret_cast<const uint16_t*>(v.data_ptr<at::BFloat16>()), v.numel());
  }
  return sum;
}

void Partition::step_from(const std::vector<at::Tensor>& views, const optim::StepParams& params) {
  // 256 Ki elements: the slice's master, moments, widened gradients and 16-bit parameters (5 MiB)
  // stay in the last-level cache between the optimizer and the copy. Measured at SmolLM2-360M's
  // shape in bf16: the step's phase 738 → 394 ms; 64 Ki-element slices spent more on the
  // per-slice tensor views than they saved (bench_profile, docs/PERFORMANCE.md).
  constexpr int64_t kSlice = int64_t{1} << 18;
  at::Tensor widened;
  for (int b = 0; b < static_cast<int>(views.size()); ++b) {
    const at::Tensor& grads = views[static_cast<size_t>(b)];
    const int64_t base = flat_.layout().buckets()[static_cast<size_t>(b)].owned_offset;
    Bucket& bucket = buckets_->bucket(b);
    for (int64_t at = 0; at < grads.numel(); at += kSlice) {
      const optim::Tile t{base + at, std::min(kSlice, grads.numel() - at)};
      at::Tensor g = grads.narrow(0, at, t.length);
      if (g.scalar_type() != at::kFloat) {
        if (!widened.defined()) widened = at::empty({kSlice}, at::kFloat);
        g = widened.narrow(0, 0, t.length).copy_(g);
      }
      const at::Tensor master_slice = master_.narrow(0, t.offset, t.length);
      optimizer_->step_slice(master_slice, g, params, t);
      bucket.write_owned(at, master_slice);
    }
  }
  parameters_written_ = true;
}

void Partition::for_each_bucket_in(optim::Tile t, const std::function<void(int, int64_t, int64_t)>& fn) const {
  const auto& buckets = flat_.layout().buckets();
  for (size_t i = 0; i < buckets.size(); ++i) {
    const int64_t begin = std::max(t.offset, buckets[i].owned_offset);
    const int64_t end = std::min(t.offset + t.length, buckets[i].owned_offset + buckets[i].shard);
    if (begin < end) fn(static_cast<int>(i), begin, end);
  }
}

void Partition::copy_into_parameters(optim::Tile t, const at::Tensor& master_tile) {
  for_each_bucket_in(t, [&](int b, int64_t begin, int64_t end) {
    const int64_t offset = begin - flat_.layout().buckets()[static_cast<size_t>(b)].owned_offset;
    buckets_->bucket(b).write_owned(offset, master_tile.narrow(0, begin - t.offset, end - begin));
  });
}

void Partition::sync_parameters(bool master_changed) {
  if (master_is_params_) return;  // one partition: nothing to copy, no one to gather from
  if (swap_) {  // the step copied each tile into the parameters already: only the gathers are left
    if (master_changed) {
      swap_->read_state(0, [&](optim::Tile t, const float* master) {
        copy_into_parameters(t, at::from_blob(const_cast<float*>(master), {t.length}, at::kFloat));
      });
    }
    for (int b = 0; b < buckets_->size(); ++b) buckets_->bucket(b).sync_parameters();
    return;
  }
  const bool written = parameters_written_ && !master_changed;
  parameters_written_ = false;
  for (int b = 0; b < buckets_->size(); ++b) {
    Bucket& bucket = buckets_->bucket(b);
    if (!written) bucket.write_owned(0, master(b));
    bucket.sync_parameters();
  }
}

void Partition::take_parameters(int b) {
  if (swap_) {
    throw Error("gathered_parameters with a modifier rank writes the master, which is on NVMe: not built yet",
                "zero_optimization.offload_optimizer.device");
  }
  const int replica_group = flat_.layout().buckets()[static_cast<size_t>(b)].replica_group;
  const at::Tensor shard = flat_.shard(flat_.buffer(b), b, owned_shards_[static_cast<size_t>(replica_group)]);
  const at::Tensor mine = master(b);
  // (At one rank a whole stage-3 unit views its shard, which an fp32 master already is.)
  if (!master_is_params_ && mine.data_ptr() != shard.data_ptr()) mine.copy_(shard);
  Bucket& bucket = buckets_->bucket(b);
  if (!bucket.persistent() && !master_is_shards_) bucket.write_shard(0, shard);
}

int64_t Partition::master_bytes_of(int b) const {
  if (master_is_params_ || swap_) return 0;
  return static_cast<int64_t>(master(b).nbytes()) - (master_is_shards_ ? buckets_->bucket(b).shard_bytes() : 0);
}

int64_t Partition::state_bytes_of(int b) const {
  // The optimizer's states are flat over the owned shards, bucket after bucket: each has b's run.
  const int64_t owned = flat_.layout().owned_numel();
  return owned == 0 ? 0 : state_bytes() / owned * flat_.layout().buckets()[static_cast<size_t>(b)].shard;
}

int64_t Partition::master_bytes() const {
  // Where the units' shards are the master, those bytes count once, as parameters.
  if (master_is_params_ || swap_) return 0;
  return static_cast<int64_t>(master_.nbytes()) - (master_is_shards_ ? buckets_->shard_bytes() : 0);
}

}  // namespace zero::engine
