#include "engine/stage3.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <limits>
#include <unordered_map>

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

Stage3::Stage3(FlatParams& flat, Communicator& comm, int rank, UnitMap map)
    : flat_(flat), comm_(comm), rank_(rank), map_(std::move(map)), bucket_of_unit_(map_.units.size(), -1) {
  const auto& buckets = flat_.layout().buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const int group = map_.group_of[static_cast<size_t>(buckets[b].params.front())];
    const bool root = group == static_cast<int>(map_.units.size());
    root_.push_back(root);
    if (!root) bucket_of_unit_[static_cast<size_t>(group)] = static_cast<int>(b);
    owned_.push_back(root ? at::Tensor()
                          : flat_.shard(flat_.buffer(static_cast<int>(b)), static_cast<int>(b), rank_).clone());
    if (!root) flat_.release(static_cast<int>(b));
  }
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
    if (!flat_.released(static_cast<int>(b))) continue;
    flat_.materialize(static_cast<int>(b));
    flat_.buffer(static_cast<int>(b)).fill_(std::numeric_limits<double>::quiet_NaN());
  }
}

void Stage3::release(int b) {
  flat_.release(b);
  gathered_ -= static_cast<int64_t>(flat_.buffer(b).nbytes());
}

void Stage3::gather(int b) {
  if (!flat_.released(b)) return;
  flat_.materialize(b);
  gathered_ += static_cast<int64_t>(flat_.buffer(b).nbytes());
  gathered_peak_ = std::max(gathered_peak_, gathered_);
  // Straight into the buffer the parameters view: no copy_ on them, so autograd's version
  // counters of the saved weights stay as they were.
  comm_.all_gather(owned_[static_cast<size_t>(b)], flat_.buffer(b), {.async = false});
}

void Stage3::gather_all() {
  for (size_t b = 0; b < root_.size(); ++b) gather(static_cast<int>(b));
}

void Stage3::release_all() {
  for (size_t b = 0; b < root_.size(); ++b) {
    if (!root_[b] && !flat_.released(static_cast<int>(b))) release(static_cast<int>(b));
  }
}

void Stage3::before_forward(UnitBase& unit) { gather(bucket_of_unit_[static_cast<size_t>(unit.unit_index())]); }

at::Tensor Stage3::after_forward(UnitBase& unit, at::Tensor output) {
  const int b = bucket_of_unit_[static_cast<size_t>(unit.unit_index())];
  if (c10::GradMode::is_enabled() && output.requires_grad()) {
    // Fires when the gradient of the unit's output is complete: just before the unit's backward.
    static_cast<const at::TensorBase&>(output).register_hook([this, b](const at::TensorBase&) { gather(b); });
  }
  release(b);
  return output;
}

void Stage3::on_bucket_complete(int b) {
  if (!root_[static_cast<size_t>(b)] && !flat_.released(b)) release(b);
}

int64_t Stage3::owned_bytes() const {
  int64_t total = 0;
  for (const auto& t : owned_) total += t.defined() ? static_cast<int64_t>(t.nbytes()) : 0;
  return total;
}

}  // namespace zero::engine
