// ExpertView — the whole model as expert parallelism spreads it over ranks (docs/moe.md): the
// dense parameters, alike on every rank, and each expert-parallel rank's own experts. Exchanged
// once when the engine is built, so that an export, a 16-bit save or a checkpoint can name what
// the other ranks hold: rank 0 writes every expert, not only its own.
#pragma once

#include <string>
#include <vector>

#include "zero/communicator.h"

namespace zero::engine {

struct ExpertView {
  // Per expert-parallel rank: its trainable parameters' names in the engine's order (the same
  // structure on every rank — the same shapes at the same places — with other experts' names).
  std::vector<std::vector<std::string>> names;
  // Per world rank: its expert-parallel rank, and its rank in its expert-data-parallel group.
  std::vector<int> expert_rank_of, expert_data_rank_of;
};

// Collective over the world (every rank calls it). `names`: this rank's parameter names.
// An error when the expert-parallel ranks' parameter lists differ in length.
ExpertView exchange_expert_view(Communicator& world, Communicator& expert_parallel, Communicator& expert_data_parallel,
                                const std::vector<std::string>& names);

}  // namespace zero::engine
