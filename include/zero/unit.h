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

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace zero {

class UnitBase;

// What zero::Init (include/zero/init.h) leaves on a unit it partitioned as it was built: the
// engine adopts it instead of flattening whole parameters.
struct PartitionedUnit {
  at::Tensor buffer;               // the unit's flat bucket, padded; its bytes are freed
  at::Tensor shard;                // this rank's shard of the bucket (undefined when spilled)
  // With offload_param.device "nvme", zero::Init writes the shard to a file of its own as soon as
  // the unit is built and leaves `shard` undefined: this reads it back (the file goes with the
  // last copy of this function).
  std::function<at::Tensor()> spilled;
  std::vector<at::Tensor> params;  // the parameters in the bucket, in bucket order
  uint64_t checksum = 0;           // of the whole bucket's values (the engine compares ranks)
  int world_size = 0;
};

namespace detail {
// What a stage-3 engine does around a unit's forward (src/engine/unit_hooks.h: inside the library).
struct UnitHooks;
// Inside a zero::Init scope: partitions the unit's parameters (defined in the library).
void partition_if_initializing(UnitBase& unit);
}  // namespace detail

class UnitBase : public torch::nn::Module {
 public:
  // Called by the engine (stage 3) when it takes the model, and with nullptr when it lets go.
  void attach(detail::UnitHooks* hooks, int index) {
    hooks_ = hooks;
    index_ = index;
  }
  int unit_index() const { return index_; }
  // Set when the unit was built inside a zero::Init scope.
  const std::optional<PartitionedUnit>& partitioned() const { return partitioned_; }
  void set_partitioned(PartitionedUnit p) { partitioned_ = std::move(p); }

 protected:
  // forward() between the engine's hooks (stage 3: gather before, free after), or alone.
  at::Tensor run(const std::function<at::Tensor()>& forward);
  // Each tensor input on its way into the block: at stage 3 the engine learns from its gradient
  // when the block's backward is over (and frees the frozen parameters then); other arguments
  // pass as they are.
  template <class T>
  decltype(auto) tracked(T&& input) {
    if constexpr (std::is_same_v<std::remove_cvref_t<T>, at::Tensor>) {
      return track_input(input);
    } else {
      return std::forward<T>(input);
    }
  }
  at::Tensor track_input(const at::Tensor& input);

 private:
  detail::UnitHooks* hooks_ = nullptr;
  int index_ = -1;
  std::optional<PartitionedUnit> partitioned_;
};

template <class Block>
class Unit : public UnitBase {
 public:
  template <class... Args>
  explicit Unit(Args&&... args)
      : block(register_module("block", std::make_shared<Block>(std::forward<Args>(args)...))) {
    detail::partition_if_initializing(*this);
  }

  template <class... Inputs>
  at::Tensor forward(Inputs&&... inputs) {
    return run([&] { return block->forward(tracked(std::forward<Inputs>(inputs))...); });
  }

  std::shared_ptr<Block> block;
};

}  // namespace zero
