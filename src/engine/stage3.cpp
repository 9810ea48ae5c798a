#include "engine/stage3.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <unordered_map>

#include "zero/activation_checkpoint.h"
#include "zero/error.h"

namespace zero::engine {

UnitMap find_units(torch::nn::Module& model, const std::vector<at::Tensor>& params,
                   const std::vector<std::string>& names) {
  UnitMap map;
  if (auto* whole = dynamic_cast<UnitBase*>(&model)) map.units.push_back(whole);
  // Note: include_self = false: the model need not live in a shared_ptr.
  for (const auto& module : model.modules(/*include_self=*/false)) {
    if (auto* unit = dynamic_cast<UnitBase*>(module.get())) map.units.push_back(unit);
  }
  std::unordered_map<const void*, int> unit_of;
  std::unordered_map<const void*, std::string> name_of;
  for (size_t i = 0; i < params.size(); ++i) name_of[params[i].unsafeGetTensorImpl()] = names[i];
  for (size_t u = 0; u < map.units.size(); ++u) {
    for (const auto& p : map.units[u]->parameters()) {
      auto [it, inserted] = unit_of.emplace(p.unsafeGetTensorImpl(), static_cast<int>(u));
      if (!inserted && it->second != static_cast<int>(u)) {
        const auto name = name_of.count(p.unsafeGetTensorImpl()) ? name_of[p.unsafeGetTensorImpl()] : "?";
        throw Error("parameter " + name + " belongs to two units (" + std::to_string(it->second) + " and " +
                        std::to_string(u) +
                        "; units may not nest): a parameter used by several units must live in the root module",
                    name);
      }
    }
  }
  for (const auto& p : params) {
    auto it = unit_of.find(p.unsafeGetTensorImpl());
    map.group_of.push_back(it == unit_of.end() ? static_cast<int>(map.units.size()) : it->second);
  }
  return map;
}

Stage3::Stage3(FlatParams& flat, Communicator& comm, int rank, UnitMap map, Stage3Limits limits,
               std::optional<SwapOptions> shard_swap, Stage3Zeropp zeropp)
    : flat_(flat),
      comm_(comm),
      rank_(rank),
      map_(std::move(map)),
      bucket_of_unit_(map_.units.size(), -1),
      gather_input_(flat_.layout().buckets().size()),
      read_ticket_(flat_.layout().buckets().size(), 0),
      element_size_(static_cast<int64_t>(c10::elementSize(flat_.dtype()))),
      limits_(limits),
      zeropp_(std::move(zeropp)),
      inflight_(flat_.layout().buckets().size()),
      secondary_(flat_.layout().buckets().size()),
      rounded_(flat_.layout().buckets().size(), false) {
  // One partition: every gather is a copy of this rank's own shard, nothing to save by rounding.
  if (comm_.size() == 1) zeropp_.weight_bits = 0;
  const auto& buckets = flat_.layout().buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const int group = map_.group_of[static_cast<size_t>(buckets[b].params.front())];
    const bool root = group == static_cast<int>(map_.units.size());
    root_.push_back(root);
    if (!root) bucket_of_unit_[static_cast<size_t>(group)] = static_cast<int>(b);
    if (root) {
      owned_.emplace_back();
    } else if (flat_.released(static_cast<int>(b))) {  // built under zero::Init: the unit kept its shard
      // (or spilled it to NVMe: read when it goes into the swap file, one at a time)
      const PartitionedUnit& p = *map_.units[static_cast<size_t>(group)]->partitioned();
      owned_.push_back(p.shard.defined() || shard_swap ? p.shard : p.spilled());
    } else {
      owned_.push_back(flat_.shard(flat_.buffer(static_cast<int>(b)), static_cast<int>(b), rank_).clone());
      flat_.release(static_cast<int>(b));
    }
  }
  for (size_t b = 0; b < buckets.size(); ++b) shard_numel_.push_back(buckets[b].shard);
  if (shard_swap) {
    // Every unit's shard goes to NVMe and out of memory (zero::Init's units let go of theirs too).
    std::vector<int64_t> bytes;
    for (size_t b = 0; b < buckets.size(); ++b)
      bytes.push_back(root_[b] ? 0 : shard_numel_[b] * static_cast<int64_t>(c10::elementSize(flat_.dtype())));
    shard_swap_ = std::make_unique<ShardSwap>(*shard_swap, bytes);
    for (size_t b = 0; b < buckets.size(); ++b) {
      if (root_[b]) continue;
      UnitBase& unit = *map_.units[static_cast<size_t>(map_.group_of[static_cast<size_t>(buckets[b].params.front())])];
      shard_swap_->write(static_cast<int>(b), owned_[b].defined() ? owned_[b] : unit.partitioned()->spilled(),
                         flat_.dtype());
      owned_[b] = at::Tensor();
      if (unit.partitioned()) {
        PartitionedUnit p = *unit.partitioned();
        p.shard = at::Tensor();
        p.spilled = nullptr;  // its file goes
        unit.set_partitioned(std::move(p));
      }
    }
  }
  states_ = UnitStates(root_);
  for (size_t u = 0; u < map_.units.size(); ++u) {
    if (bucket_of_unit_[u] < 0) continue;  // a unit without trainable parameters: nothing to do
    map_.units[u]->attach(this, static_cast<int>(u));
  }
}

Stage3::~Stage3() {
  for (UnitBase* unit : map_.units) unit->attach(nullptr, -1);
  // Gathering here would be a collective in a destructor (a hang when ranks unwind differently).
  // Freed parameters would crash on first use, so they come back as NaN: loud, not undefined.
  // Engine::gather_parameters() before the engine goes keeps the real weights.
  for (size_t b = 0; b < root_.size(); ++b) {
    flat_.own_aliased(static_cast<int>(b));  // one partition: the parameters viewed the shard
    if (!flat_.released(static_cast<int>(b))) continue;
    flat_.materialize(static_cast<int>(b));
    flat_.buffer(static_cast<int>(b)).fill_(std::numeric_limits<double>::quiet_NaN());
  }
}

void Stage3::wait_inflight(int b) {
  if (uint64_t& ticket = read_ticket_[static_cast<size_t>(b)]; ticket != 0) {  // a prefetched read: now its gather
    shard_swap_->wait(ticket);
    ticket = 0;
    // (Prefetches are for units about to compute.)
    comm_.all_gather(gather_input_[static_cast<size_t>(b)], flat_.buffer(b),
                     {.async = false, .quantize_bits = zeropp_.weight_bits});
    rounded_[static_cast<size_t>(b)] = zeropp_.weight_bits > 0;
  }
  if (auto& work = inflight_[static_cast<size_t>(b)]) {
    work->wait();
    work.reset();
  }
  gather_input_[static_cast<size_t>(b)] = at::Tensor();  // a swapped shard's copy: the gather is done
  if (states_.at(b) == ShardState::kGathering) states_.set(b, ShardState::kWhole);
}

int64_t Stage3::elements(int b) const { return flat_.layout().buckets()[static_cast<size_t>(b)].padded; }

bool Stage3::fits(int b) const { return gathered_ + elements(b) <= limits_.max_live; }

void Stage3::release(int b) {
  if (states_.at(b) == ShardState::kSharded) return;
  wait_inflight(b);  // never free memory a collective still writes
  states_.set(b, ShardState::kSharded);  // an error for the root, which is never freed
  rounded_[static_cast<size_t>(b)] = false;
  flat_.release(b);
  gathered_ -= elements(b);
}

std::shared_ptr<Work> Stage3::start_gather(int b, bool async, bool compute) {
  states_.set(b, async ? ShardState::kGathering : ShardState::kWhole);
  gather_order_.record(b);
  gathered_ += elements(b);
  gathered_peak_ = std::max(gathered_peak_, gathered_);
  if (comm_.size() == 1 && !shard_swap_) {
    // One partition: the shard is the whole bucket, so the parameters view it (no copy, no
    // second copy of the unit in memory).
    flat_.materialize_as(b, owned_[static_cast<size_t>(b)]);
    return nullptr;
  }
  flat_.materialize(b);
  // qwZ rounds what every rank computes with, the secondary partition's copy of it included.
  rounded_[static_cast<size_t>(b)] = compute && zeropp_.weight_bits > 0;
  if (compute && secondary_[static_cast<size_t>(b)].defined()) {
    // hpZ: the values this unit last computed with, from this rank's group (within the node).
    return zeropp_.secondary_group->all_gather(secondary_[static_cast<size_t>(b)], flat_.buffer(b), {.async = async});
  }
  if (shard_swap_ && async) {
    // A prefetch from NVMe: only the read starts now (wait_inflight does the all-gather), so
    // that the disk works while the units before this one compute.
    gather_input_[static_cast<size_t>(b)] =
        shard_swap_->read_async(b, shard_numel_[static_cast<size_t>(b)], flat_.dtype(), read_ticket_[static_cast<size_t>(b)]);
    return nullptr;
  }
  // On NVMe the shard is read first, and kept until its all-gather is done.
  const at::Tensor input = shard_swap_ ? shard(b) : owned_[static_cast<size_t>(b)];
  if (shard_swap_) gather_input_[static_cast<size_t>(b)] = input;
  // Straight into the buffer the parameters view: no copy_ on them, so autograd's version
  // counters of the saved weights stay as they were.
  return comm_.all_gather(input, flat_.buffer(b),
                          {.async = async, .quantize_bits = compute ? zeropp_.weight_bits : 0});
}

void Stage3::gather(int b) {
  wait_inflight(b);
  if (states_.at(b) == ShardState::kSharded) {
    start_gather(b, /*async=*/false);
  } else if (rounded_[static_cast<size_t>(b)]) {
    // Whole with qwZ's rounded values (kept for its backward, say): an exact gather is wanted
    // (a checkpoint, gathered parameters that may be changed and written back).
    const at::Tensor input = shard(b);
    comm_.all_gather(input, flat_.buffer(b), {.async = false});
    rounded_[static_cast<size_t>(b)] = false;
  }
  gather_input_[static_cast<size_t>(b)] = at::Tensor();
}

void Stage3::gather_for_compute(int b) {
  wait_inflight(b);
  if (states_.at(b) != ShardState::kSharded) return;
  start_gather(b, /*async=*/false, /*compute=*/true);
  gather_input_[static_cast<size_t>(b)] = at::Tensor();
}

void Stage3::prefetch(int b) {
  if (states_.at(b) != ShardState::kSharded || elements(b) > limits_.prefetch_bucket || !fits(b)) return;
  inflight_[static_cast<size_t>(b)] = start_gather(b, /*async=*/true, /*compute=*/true);
}

void Stage3::keep_secondary(int b) {
  at::Tensor& kept = secondary_[static_cast<size_t>(b)];
  if (!zeropp_.secondary_group || kept.defined() || states_.at(b) == ShardState::kSharded) return;
  wait_inflight(b);
  const int group = zeropp_.secondary_group->size();
  const int64_t part = elements(b) / group;  // the padded bucket splits evenly: group divides the world
  kept = flat_.buffer(b).narrow(0, part * zeropp_.secondary_group->rank(), part).clone();
}

void Stage3::forget_secondaries() {
  for (auto& kept : secondary_) kept = at::Tensor();
}

int64_t Stage3::secondary_bytes() const {
  int64_t total = 0;
  for (const auto& kept : secondary_) total += kept.defined() ? static_cast<int64_t>(kept.nbytes()) : 0;
  return total;
}

void Stage3::begin_forward() {
  in_forward_ = true;
  cursor_ = 0;
  forget_secondaries();  // the parameters may have changed since
  // Units kept for a backward that never came (a forward without one) go now.
  for (size_t b = 0; b < states_.size(); ++b) {
    if (states_.at(static_cast<int>(b)) == ShardState::kKept) release(static_cast<int>(b));
  }
}

void Stage3::end_forward() {
  in_forward_ = false;
  if (mode_ != StepMode::kRecording) return;
  mode_ = StepMode::kFollowing;
  position_of_.assign(map_.units.size(), -1);
  for (size_t i = order_.size(); i-- > 0;) position_of_[static_cast<size_t>(order_[i])] = static_cast<int>(i);
  record_reuse_distances();
}

void Stage3::record_reuse_distances() {
  // The whole trace of a step: forward in order_, then backward in reverse.
  std::vector<int> trace(order_);
  trace.insert(trace.end(), order_.rbegin(), order_.rend());
  reuse_distance_.assign(order_.size(), std::numeric_limits<int64_t>::max());
  for (size_t i = 0; i < order_.size(); ++i) {
    int64_t between = 0;
    for (size_t j = i + 1; j < trace.size(); ++j) {
      if (trace[j] == trace[i]) {
        reuse_distance_[i] = between;
        break;
      }
      between += elements(bucket_of_unit_[static_cast<size_t>(trace[j])]);
    }
  }
}

void Stage3::gather_all() {
  for (size_t b = 0; b < root_.size(); ++b) gather(static_cast<int>(b));
}

void Stage3::release_all() {
  forget_secondaries();  // backward is over, or the parameters were gathered to be read or changed
  for (size_t b = 0; b < root_.size(); ++b) {
    if (!root_[b]) release(static_cast<int>(b));
  }
}

void Stage3::before_forward(UnitBase& unit) {
  const int u = unit.unit_index();
  if (in_forward_ && mode_ == StepMode::kRecording) order_.push_back(u);
  const bool follow = in_forward_ && mode_ == StepMode::kFollowing;
  if (follow && (cursor_ >= order_.size() || order_[cursor_] != u)) {
    mode_ = StepMode::kOnDemand;
    if (rank_ == 0) {
      std::fprintf(stderr,
                   "zerocpp: warning: stage 3: the units ran in a different order than on the first step; "
                   "prefetching is off from here on (units are gathered on demand)\n");
    }
  }
  ++cursor_;
  gather_for_compute(bucket_of_unit_[static_cast<size_t>(u)]);
  if (mode_ == StepMode::kFollowing && follow && cursor_ < order_.size())
    prefetch(bucket_of_unit_[static_cast<size_t>(order_[cursor_])]);
}

at::Tensor Stage3::after_forward(UnitBase& unit, at::Tensor output) {
  const int b = bucket_of_unit_[static_cast<size_t>(unit.unit_index())];
  if (c10::GradMode::is_enabled() && output.requires_grad()) {
    // Fires when the gradient of the unit's output is complete: just before the unit's backward.
    const int u = unit.unit_index();
    static_cast<const at::TensorBase&>(output).register_hook([this, b, u](const at::TensorBase&) {
      gather_for_compute(b);
      // Backward runs the units in reverse: the one before this in forward order comes next.
      if (mode_ == StepMode::kFollowing && position_of_[static_cast<size_t>(u)] > 0)
        prefetch(bucket_of_unit_[static_cast<size_t>(
            order_[static_cast<size_t>(position_of_[static_cast<size_t>(u)] - 1)])]);
    });
  }
  // A checkpoint's recomputation in backward: the unit's own backward follows at once.
  const bool recomputed = checkpointing::detail::recomputing() && c10::GradMode::is_enabled() && output.requires_grad();
  if (keep_after_forward() || recomputed) {
    states_.set(b, ShardState::kKept);
  } else {
    if (in_forward_) keep_secondary(b);  // outside a forward nothing would forget it
    release(b);
  }
  return output;
}

bool Stage3::keep_after_forward() const {
  // cursor_ - 1: this unit's position in the recorded order (before_forward advanced it).
  return in_forward_ && mode_ == StepMode::kFollowing && cursor_ >= 1 && cursor_ <= order_.size() &&
         reuse_distance_[cursor_ - 1] <= limits_.max_reuse_distance && gathered_ <= limits_.max_live;
}

void Stage3::on_bucket_complete(int b) {
  if (!root_[static_cast<size_t>(b)]) release(b);
}

void Stage3::verify_order(const std::vector<std::string>& param_names) {
  gather_order_.verify(comm_, [&](int64_t b) {
    const int p = flat_.layout().buckets()[static_cast<size_t>(b)].params.front();
    return "the unit holding " + param_names[static_cast<size_t>(p)];
  });
}

void Stage3::own_view(int b, at::Tensor view) {
  at::Tensor& owned = owned_[static_cast<size_t>(b)];
  if (root_[static_cast<size_t>(b)] || view.sizes() != owned.sizes() || view.scalar_type() != owned.scalar_type()) {
    throw Error("internal: a shard view of another size, type or bucket", "stage3");
  }
  owned = std::move(view);
  // A unit built under zero::Init holds its shard too: let it hold the view, so the old bytes go.
  UnitBase& unit = *map_.units[static_cast<size_t>(map_.group_of[static_cast<size_t>(
      flat_.layout().buckets()[static_cast<size_t>(b)].params.front())])];
  if (unit.partitioned()) {
    PartitionedUnit p = *unit.partitioned();
    p.shard = owned;
    unit.set_partitioned(std::move(p));
  }
}

at::Tensor Stage3::shard(int b) const {
  if (!shard_swap_ || root_[static_cast<size_t>(b)]) return owned_[static_cast<size_t>(b)];
  return shard_swap_->read(b, shard_numel_[static_cast<size_t>(b)], flat_.dtype());
}

void Stage3::write_shard(int b, int64_t offset, const at::Tensor& values) {
  if (!shard_swap_) {
    owned_[static_cast<size_t>(b)].narrow(0, offset, values.numel()).copy_(values);
    return;
  }
  if (offset == 0 && values.numel() == shard_numel_[static_cast<size_t>(b)]) {
    shard_swap_->write(b, values, flat_.dtype());  // all of it: nothing to read first
    return;
  }
  at::Tensor whole = shard(b);
  whole.narrow(0, offset, values.numel()).copy_(values);
  shard_swap_->write(b, whole, flat_.dtype());
}

bool Stage3::buffer_views_shard(int b) const {
  const at::Tensor& owned = owned_[static_cast<size_t>(b)];
  return owned.defined() && !flat_.released(b) && flat_.buffer(b).data_ptr() == owned.data_ptr();
}

int64_t Stage3::owned_bytes() const {
  int64_t total = 0;
  for (const auto& t : owned_) total += t.defined() ? static_cast<int64_t>(t.nbytes()) : 0;
  return total;
}

}  // namespace zero::engine
