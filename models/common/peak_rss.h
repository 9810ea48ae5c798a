// Each rank's peak resident memory so far, for the trainers' report lines.
#pragma once

#include <cstdint>
#include <vector>

namespace zero {
class World;
}

namespace zero::models {

// Collective: every rank's peak RSS (KiB), by rank.
std::vector<int64_t> peak_rss_per_rank(World& world);

}  // namespace zero::models
