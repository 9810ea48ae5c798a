// ZERO_DEBUG_BUFFERS=1: a debug mode for buffer lifetimes. Every buffer given back to a pool or
// released is poisoned (NaN for floating types, all ones otherwise), so a reader that still holds
// it computes NaN instead of plausible numbers; and every MPI piece checks at completion that the
// memory it was given is still there (see PieceQueue). Off: one cached branch per use.
#pragma once

namespace at {
class Tensor;
}

namespace zero {

// Whether ZERO_DEBUG_BUFFERS is set to something other than "" or "0" (read once).
bool debug_buffers();
// Fills `t` with NaN (floating dtypes) or all-ones bytes, when debug_buffers().
void poison_if_debugging(const at::Tensor& t);

}  // namespace zero
