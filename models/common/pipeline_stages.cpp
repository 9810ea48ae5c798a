#include "models/common/pipeline_stages.h"

#include <fmt/core.h>

#include <algorithm>
#include <limits>

#include "text/regex.h"
#include "zero/error.h"

namespace zero::pipeline {
namespace {

// The lightest heaviest stage: best[s][i] is that of items [0, i) on s stages, each non-empty.
std::vector<int> balanced_bounds(const std::vector<int64_t>& weights, int stages) {
  const int n = static_cast<int>(weights.size());
  std::vector<int64_t> prefix(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + weights[static_cast<size_t>(i)];
  auto weight = [&](int from, int to) { return prefix[static_cast<size_t>(to)] - prefix[static_cast<size_t>(from)]; };
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(static_cast<size_t>(stages) + 1,
                                         std::vector<int64_t>(static_cast<size_t>(n) + 1, kNone));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    for (int i = s; i <= n; ++i) {
      for (int j = s - 1; j < i; ++j) {
        const int64_t before = best[static_cast<size_t>(s) - 1][static_cast<size_t>(j)];
        if (before == kNone) continue;
        best[static_cast<size_t>(s)][static_cast<size_t>(i)] =
            std::min(best[static_cast<size_t>(s)][static_cast<size_t>(i)], std::max(before, weight(j, i)));
      }
    }
  }
  // From the back: each stage as short as the optimum allows, so the earlier stages take more.
  std::vector<int> bounds(static_cast<size_t>(stages) + 1, 0);
  bounds[static_cast<size_t>(stages)] = n;
  const int64_t target = best[static_cast<size_t>(stages)][static_cast<size_t>(n)];
  for (int s = stages, end = n; s >= 1; --s) {
    for (int j = end - 1; j >= s - 1; --j) {
      const int64_t before = best[static_cast<size_t>(s) - 1][static_cast<size_t>(j)];
      if (before != kNone && std::max(before, weight(j, end)) <= target) {
        bounds[static_cast<size_t>(s) - 1] = j;
        end = j;
        break;
      }
    }
  }
  return bounds;
}

}  // namespace

std::vector<int> partition_stages(const std::vector<Item>& items, int stages, const std::string& method,
                                  const std::string& key) {
  if (stages < 1 || static_cast<int>(items.size()) < stages) {
    throw Error(fmt::format("{} pipeline stages for a model of {} layers (the embedding and the head included): "
                            "each stage needs one",
                            stages, items.size()),
                key);
  }
  std::vector<int64_t> weights;
  if (method == "parameters") {
    for (const Item& item : items) weights.push_back(item.parameters);
  } else if (method == "uniform") {
    for (const Item& item : items) weights.push_back(item.repeated ? 1 : 0);
  } else if (method.rfind("type:", 0) == 0) {
    const text::Regex regex("(?i)" + method.substr(5), /*literal=*/false, key);  // DeepSpeed matches ignoring case
    int64_t matched = 0;
    for (const Item& item : items) {
      weights.push_back(regex.find_all(item.type).empty() ? 0 : 1);
      matched += weights.back();
    }
    if (matched == 0) {
      throw Error(fmt::format("\"{}\" matches no layer (the layers' types: {}, {}, {})", method, items.front().type,
                              items.size() > 2 ? items[1].type : items.back().type, items.back().type),
                  key);
    }
  } else {
    throw Error(fmt::format("\"{}\": zerocpp cuts stages by \"parameters\", \"uniform\" or \"type:REGEX\"", method), key);
  }
  return balanced_bounds(weights, stages);
}

}  // namespace zero::pipeline
