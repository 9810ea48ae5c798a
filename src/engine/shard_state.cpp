#include "engine/shard_state.h"

#include <string>

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

bool ShardLifecycle::allowed(ShardState from, ShardState to) {
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

void ShardLifecycle::set(ShardState to, int bucket) {
  if (!allowed(state_, to)) {
    throw Error(std::string("internal: stage 3 bucket ") + std::to_string(bucket) + " cannot go from " +
                    to_string(state_) + " to " + to_string(to),
                "zero_optimization.stage");
  }
  state_ = to;
}

bool ShardLifecycle::usable() const {
  return state_ == ShardState::kPersistent || state_ == ShardState::kWhole || state_ == ShardState::kKept;
}

}  // namespace zero::engine
