// Engine::GatheredParameters: whole parameters for reading or (from one rank) changing.
#include <ATen/ATen.h>

#include "engine/engine_state.h"
#include "zero/error.h"

namespace zero {

Engine::GatheredParameters Engine::gathered_parameters(int modifier_rank) {
  if (modifier_rank >= state_->world.size()) {
    throw Error("gathered_parameters: modifier rank " + std::to_string(modifier_rank) +
                    " is not below the world size " + std::to_string(state_->world.size()),
                "modifier_rank", state_->world.rank());
  }
  return GatheredParameters(*this, modifier_rank);
}

Engine::GatheredParameters::GatheredParameters(Engine& engine, int modifier_rank)
    : engine_(engine), modifier_rank_(modifier_rank) {
  engine_.gather_parameters();
}

Engine::GatheredParameters::~GatheredParameters() {
  State& s = *engine_.state_;
  const auto& buckets = s.flat->layout().buckets();
  for (size_t i = 0; i < buckets.size(); ++i) {
    const int b = static_cast<int>(i);
    if (modifier_rank_ >= 0) {
      // The modifier's whole buffer to everyone (raw collective writes: no version bumps), then
      // this rank's shard of it becomes its master and, at stage 3, its persistent shard.
      const at::Tensor& buffer = s.flat->buffer(b);
      s.comm.broadcast(buffer, modifier_rank_, {.async = false});
      const at::Tensor shard = s.flat->shard(buffer, b, s.owner_rank);
      s.master.narrow(0, buckets[i].owned_offset, buckets[i].shard).copy_(shard);
      if (s.stage3 && !s.stage3->is_root(b)) s.stage3->owned(b).copy_(shard);
    }
  }
  if (s.stage3) s.stage3->release_all();
}

}  // namespace zero
