// Differential check of zerocpp's Hjson reader against hjson-go (Debian's `hjson-cli`), the
// reference implementation: both read the same file; their documents must be equal, or differ
// only where zerocpp differs on purpose (src/config/hjson.h lists those).
#pragma once

#include <string>

namespace zero::hjson_oracle {

enum class Verdict { kSame, kKnownDifference, kMismatch };

struct Comparison {
  Verdict verdict;
  std::string detail;  // why, for a known difference or a mismatch
};

// `path` holds `text` (hjson-cli reads the file). Throws std::runtime_error when hjson-cli cannot
// be run at all.
Comparison compare_with_hjson_go(const std::string& text, const std::string& path);

}  // namespace zero::hjson_oracle
