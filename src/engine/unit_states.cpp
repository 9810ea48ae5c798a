#include "engine/unit_states.h"

#include "zero/error.h"

namespace zero::engine {

const char* to_string(ShardState state) {
  switch (state) {
    case ShardState::kPersistent:
      return "persistent";
    case ShardState::kSharded:
      return "sharded";
    case ShardState::kGathering:
      return "gathering";
    case ShardState::kWhole:
      return "whole";
    case ShardState::kKept:
      return "kept";
  }
  return "?";
}

UnitStates::UnitStates(const std::vector<bool>& persistent) {
  for (bool p : persistent) states_.push_back(p ? ShardState::kPersistent : ShardState::kSharded);
}

bool UnitStates::allowed(ShardState from, ShardState to) {
  using S = ShardState;
  if (from == to) return true;
  switch (from) {
    case S::kPersistent:
      return false;
    case S::kSharded:
      return to == S::kGathering || to == S::kWhole;
    case S::kGathering:
      return to == S::kWhole;  // a prefetch is waited for before anything else
    case S::kWhole:
      return to == S::kKept || to == S::kSharded;
    case S::kKept:
      return to == S::kSharded;
  }
  return false;
}

void UnitStates::set(int b, ShardState to) {
  ShardState& state = states_.at(static_cast<size_t>(b));
  if (!allowed(state, to)) {
    throw Error(std::string("internal: stage 3 bucket ") + std::to_string(b) + " cannot go from " + to_string(state) +
                    " to " + to_string(to),
                "zero_optimization.stage");
  }
  state = to;
}

bool UnitStates::usable(int b) const {
  const ShardState s = at(b);
  return s == ShardState::kPersistent || s == ShardState::kWhole || s == ShardState::kKept;
}

}  // namespace zero::engine
