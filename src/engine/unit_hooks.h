// What a stage-3 engine does around a unit's forward: the other side of zero::UnitBase
// (include/zero/unit.h), which holds only a pointer to it. Stage3 implements it.
#pragma once

#include <ATen/core/Tensor.h>

#include "zero/unit.h"

namespace zero::detail {

struct UnitHooks {
  virtual ~UnitHooks() = default;
  virtual void before_forward(UnitBase& unit) = 0;
  virtual at::Tensor after_forward(UnitBase& unit, at::Tensor output) = 0;
  // Each tensor input of the unit's forward passes through here (and may come back wrapped).
  virtual at::Tensor track_input(UnitBase& unit, at::Tensor input) { return input; }
};

}  // namespace zero::detail
