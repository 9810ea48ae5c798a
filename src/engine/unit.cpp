// zero::UnitBase's way through the engine's hooks (include/zero/unit.h).
#include "zero/unit.h"

#include "engine/unit_hooks.h"

namespace zero {

at::Tensor UnitBase::run(const std::function<at::Tensor()>& forward) {
  if (hooks_ == nullptr) return forward();
  hooks_->before_forward(*this);
  return hooks_->after_forward(*this, forward());
}

at::Tensor UnitBase::track_input(const at::Tensor& input) {
  return hooks_ == nullptr ? input : hooks_->track_input(*this, input);
}

}  // namespace zero
