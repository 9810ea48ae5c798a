// Each rank's peak resident memory so far (and other per-rank figures), for the trainers' report lines.
#pragma once

#include <cstdint>
#include <vector>

namespace zero {
class World;
}

namespace zero::models {

// Collective: every rank's `value`, by rank.
std::vector<int64_t> gather_per_rank(World& world, int64_t value);
// Collective: every rank's peak RSS (KiB), by rank.
std::vector<int64_t> peak_rss_per_rank(World& world);

}  // namespace zero::models
