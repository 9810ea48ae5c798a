#include "engine/stage3.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <functional>
#include <cstdio>
#include <limits>
#include <unordered_map>

#include <torch/csrc/autograd/custom_function.h>

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

Stage3::Stage3(BucketGroup& buckets, UnitMap map, Stage3Limits limits, std::optional<SwapOptions> shard_swap,
               Stage3Zeropp zeropp, FrozenUnits frozen)
    : buckets_(buckets),
      map_(std::move(map)),
      buckets_of_unit_(map_.units.size()),
      frozen_buckets_of_unit_(map_.units.size()),
      limits_(limits) {
  std::vector<UnitBase*> unit_of_bucket;
  for (int b = 0; b < buckets_.size(); ++b) {
    const int group = map_.group_of[static_cast<size_t>(buckets_.bucket(b).layout().params.front())];
    const bool root = group == static_cast<int>(map_.units.size());
    unit_of_bucket.push_back(root ? nullptr : map_.units[static_cast<size_t>(group)]);
    if (!root) buckets_of_unit_[static_cast<size_t>(group)].push_back(b);
  }
  buckets_.shard_parameters(unit_of_bucket, std::move(shard_swap), std::move(zeropp));
  for (FrozenGroup& g : frozen.groups) {
    const int f = static_cast<int>(frozen_.size());
    frozen_.push_back(g.buckets);
    std::vector<UnitBase*> unit_of_frozen;
    for (int b = 0; b < g.buckets->size(); ++b) {
      const int group = g.group_of[static_cast<size_t>(g.buckets->bucket(b).layout().params.front())];
      const bool root = group == static_cast<int>(map_.units.size());
      unit_of_frozen.push_back(root ? nullptr : map_.units[static_cast<size_t>(group)]);
      if (!root) frozen_buckets_of_unit_[static_cast<size_t>(group)].emplace_back(f, b);
    }
    // qwZ's int8 codes round floating-point values; 4-bit codes (bytes) move as they are.
    Stage3Zeropp zeropp;
    if (at::isFloatingType(g.buckets->flat().dtype())) zeropp.weight_bits = frozen.weight_bits;
    g.buckets->shard_parameters(unit_of_frozen, std::nullopt, std::move(zeropp));
  }
  for (size_t u = 0; u < map_.units.size(); ++u) {
    // A unit with neither trainable nor frozen parameters of its own: nothing to do.
    if (buckets_of_unit_[u].empty() && frozen_buckets_of_unit_[u].empty()) continue;
    map_.units[u]->attach(this, static_cast<int>(u));
  }
}

Stage3::~Stage3() {
  for (UnitBase* unit : map_.units) unit->attach(nullptr, -1);
}

int64_t Stage3::elements_of_unit(int u) const {
  int64_t n = 0;
  for (int b : buckets_of_unit_[static_cast<size_t>(u)]) n += buckets_.bucket(b).elements();
  for (auto [f, b] : frozen_buckets_of_unit_[static_cast<size_t>(u)]) n += frozen_[static_cast<size_t>(f)]->bucket(b).elements();
  return n;
}

void Stage3::for_each_bucket(int u, const std::function<void(Bucket&)>& fn) {
  for (int b : buckets_of_unit_[static_cast<size_t>(u)]) fn(buckets_.bucket(b));
  for (auto [f, b] : frozen_buckets_of_unit_[static_cast<size_t>(u)]) fn(frozen_[static_cast<size_t>(f)]->bucket(b));
}

namespace {

// Identity on a unit's input; its backward runs once the input's gradient is complete.
struct AfterUnitBackward : public torch::autograd::Function<AfterUnitBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input, Stage3* stage3, int64_t u) {
    ctx->saved_data["stage3"] = reinterpret_cast<int64_t>(stage3);
    ctx->saved_data["unit"] = u;
    return input.view_as(input);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    reinterpret_cast<Stage3*>(ctx->saved_data["stage3"].toInt())->release_frozen(static_cast<int>(ctx->saved_data["unit"].toInt()));
    return {grads[0], at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor Stage3::track_input(UnitBase& unit, at::Tensor input) {
  const int u = unit.unit_index();
  if (frozen_buckets_of_unit_[static_cast<size_t>(u)].empty() || !c10::GradMode::is_enabled() || !input.requires_grad())
    return input;
  return AfterUnitBackward::apply(input, this, static_cast<int64_t>(u));
}

void Stage3::release_frozen(int u) {
  for (auto [f, b] : frozen_buckets_of_unit_[static_cast<size_t>(u)]) frozen_[static_cast<size_t>(f)]->bucket(b).release();
}

void Stage3::end_backward() {
  for (BucketGroup* group : frozen_) group->release_all();
}

void Stage3::prefetch(int u) {
  const int64_t n = elements_of_unit(u);
  if (n > limits_.prefetch_bucket || gathered() + n > limits_.max_live) return;
  for_each_bucket(u, [](Bucket& bucket) {
    if (bucket.state() == ShardState::kSharded) bucket.prefetch();
  });
}

void Stage3::begin_forward() {
  in_forward_ = true;
  cursor_ = 0;
  buckets_.forget_secondaries();  // the parameters may have changed since
  // Units kept for a backward that never came (a forward without one) go now.
  for (int b = 0; b < buckets_.size(); ++b) {
    if (buckets_.bucket(b).state() == ShardState::kKept) buckets_.bucket(b).release();
  }
  for (BucketGroup* group : frozen_) {
    for (int b = 0; b < group->size(); ++b) {
      if (group->bucket(b).state() == ShardState::kKept) group->bucket(b).release();
    }
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
      between += elements_of_unit(trace[j]);
    }
  }
}

void Stage3::before_forward(UnitBase& unit) {
  const int u = unit.unit_index();
  if (in_forward_ && mode_ == StepMode::kRecording) order_.push_back(u);
  const bool follow = in_forward_ && mode_ == StepMode::kFollowing;
  if (follow && (cursor_ >= order_.size() || order_[cursor_] != u)) {
    mode_ = StepMode::kOnDemand;
    if (buckets_.comm().rank() == 0) {
      std::fprintf(stderr,
                   "zerocpp: warning: stage 3: the units ran in a different order than on the first step; "
                   "prefetching is off from here on (units are gathered on demand)\n");
    }
  }
  ++cursor_;
  for_each_bucket(u, [](Bucket& bucket) { bucket.gather_for_compute(); });
  if (mode_ == StepMode::kFollowing && follow && cursor_ < order_.size()) prefetch(order_[cursor_]);
}

at::Tensor Stage3::after_forward(UnitBase& unit, at::Tensor output) {
  const int u = unit.unit_index();
  if (c10::GradMode::is_enabled() && output.requires_grad()) {
    // Fires when the gradient of the unit's output is complete: just before the unit's backward.
    static_cast<const at::TensorBase&>(output).register_hook([this, u](const at::TensorBase&) {
      for_each_bucket(u, [](Bucket& bucket) { bucket.gather_for_compute(); });
      // Backward runs the units in reverse: the one before this in forward order comes next.
      if (mode_ == StepMode::kFollowing && position_of_[static_cast<size_t>(u)] > 0)
        prefetch(order_[static_cast<size_t>(position_of_[static_cast<size_t>(u)] - 1)]);
    });
  }
  // A checkpoint's recomputation in backward: the unit's own backward follows at once.
  const bool recomputed = checkpointing::detail::recomputing() && c10::GradMode::is_enabled() && output.requires_grad();
  const bool keep = keep_after_forward() || recomputed;
  for_each_bucket(u, [&](Bucket& bucket) {
    if (keep) {
      bucket.keep();
    } else {
      if (in_forward_) bucket.keep_secondary();  // outside a forward nothing would forget it
      bucket.release();
    }
  });
  return output;
}

bool Stage3::keep_after_forward() const {
  // cursor_ - 1: this unit's position in the recorded order (before_forward advanced it).
  return in_forward_ && mode_ == StepMode::kFollowing && cursor_ >= 1 && cursor_ <= order_.size() &&
         reuse_distance_[cursor_ - 1] <= limits_.max_reuse_distance && gathered() <= limits_.max_live;
}

void Stage3::verify_order(const std::vector<std::string>& param_names) {
  buckets_.verify_gather_order([&](int64_t b) {
    const int p = buckets_.bucket(static_cast<int>(b)).layout().params.front();
    return "the unit holding " + param_names[static_cast<size_t>(p)];
  });
  for (BucketGroup* group : frozen_) {
    group->verify_gather_order([](int64_t b) { return "the frozen parameters of unit bucket " + std::to_string(b); });
  }
}

int64_t Stage3::gathered() const {
  int64_t n = buckets_.gathered();
  for (const BucketGroup* group : frozen_) n += group->gathered();
  return n;
}

}  // namespace zero::engine
