// zero::Unit<Block> — the sharding unit of ZeRO stage 3 (docs/stage3.md).
//
//   struct Gpt : torch::nn::Module {
//     std::vector<std::shared_ptr<zero::Unit<Block>>> blocks;   // register_module("h0",
//     make_shared<Unit<Block>>(args...))
//     ... x = blocks[l]->forward(x); ...
//   };
//
// At stages 0-2 a Unit is a transparent pass-through. At stage 3 the engine gives every unit one
// flat buffer of its parameters, cut into one shard per rank; the unit's forward all-gathers the
// buffer, runs the block, and frees it again (the parameter tensors stay, their bytes go), and a
// hook on its output re-gathers it before the block's backward. Parameters outside every unit
// form the root unit, which stays gathered. LibTorch has no module hooks in C++, hence the
// wrapper. The block's forward must return one tensor.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <utility>

namespace zero {

class UnitBase;

namespace detail {
// What a stage-3 engine does around a unit's forward.
struct UnitHooks {
  virtual ~UnitHooks() = default;
  virtual void before_forward(UnitBase& unit) = 0;
  virtual at::Tensor after_forward(UnitBase& unit, at::Tensor output) = 0;
};
}  // namespace detail

class UnitBase : public torch::nn::Module {
 public:
  // Called by the engine (stage 3) when it takes the model, and with nullptr when it lets go.
  void attach(detail::UnitHooks* hooks, int index) {
    hooks_ = hooks;
    index_ = index;
  }
  int unit_index() const { return index_; }

 protected:
  at::Tensor run(const std::function<at::Tensor()>& forward) {
    if (hooks_ == nullptr) return forward();
    hooks_->before_forward(*this);
    return hooks_->after_forward(*this, forward());
  }

 private:
  detail::UnitHooks* hooks_ = nullptr;
  int index_ = -1;
};

template <class Block>
class Unit : public UnitBase {
 public:
  template <class... Args>
  explicit Unit(Args&&... args)
      : block(register_module("block", std::make_shared<Block>(std::forward<Args>(args)...))) {}

  template <class... Inputs>
  at::Tensor forward(Inputs&&... inputs) {
    return run([&] { return block->forward(std::forward<Inputs>(inputs)...); });
  }

  std::shared_ptr<Block> block;
};

}  // namespace zero
