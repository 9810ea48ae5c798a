// Which layers each pipeline stage holds (DeepSpeed's PipelineModule partition_method; the
// schedule that runs them: zero/pipeline.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zero::pipeline {

// One entry of the model's layer list as DeepSpeed's PipelineModule sees it: the embedding, each
// decoder layer, the head. `type` is what "type:REGEX" matches; `repeated`: a decoder layer (what
// "uniform" balances).
struct Item {
  std::string type;
  int64_t parameters = 0;
  bool repeated = false;
};

// Where each stage begins: stage s holds items [bounds[s], bounds[s + 1]) (stages + 1 entries,
// every stage at least one item). Contiguous, with the heaviest stage as light as it can be (by
// parameters, by decoder layers for "uniform", by matching items for "type:REGEX"); among equal
// cuts, the earlier stages take more. Throws naming `key` and the numbers when there are fewer
// items than stages, a method it does not know, or a pattern that matches no item.
std::vector<int> partition_stages(const std::vector<Item>& items, int stages, const std::string& method,
                                  const std::string& key = "pipeline.partition");

}  // namespace zero::pipeline
