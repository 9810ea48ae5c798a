// How the config's AutoTP block meets the Llama family's split (llama.h: Megatron's layout).
#include "models/llama/llama_tensor_parallel.h"

#include <fmt/core.h>

#include "text/regex.h"
#include "text/tokenizer.h"
#include "zero/error.h"

namespace zero::llama {

namespace {

bool ends_with(const std::string& name, const std::string& tail) {
  return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

Split split_of(const std::string& name) {
  for (const char* column : {"q_proj.", "k_proj.", "v_proj.", "gate_proj.", "up_proj."})
    if (name.find(column) != std::string::npos) return Split::kColumn;
  for (const char* row : {"o_proj.weight", "down_proj.weight"})
    if (ends_with(name, row)) return Split::kRow;
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return Split::kVocabulary;
  return Split::kWhole;
}

int split_dim(Split split) { return split == Split::kWhole ? -1 : split == Split::kRow ? 1 : 0; }

void check_tensor_parallel_config(const TensorParallelConfig& tp, const LlamaConfig& model) {
  if (!tp.preset_model.empty() && tp.preset_model != model.model_type) {
    throw Error(fmt::format("tensor_parallel.preset_model is \"{}\" but the model's config.json says model_type \"{}\"",
                            tp.preset_model, model.model_type),
                "tensor_parallel.preset_model");
  }
  const std::vector<HfTensor> tensors = llama_tensors(model);
  for (size_t i = 0; i < tp.layer_specs.size(); ++i) {
    const TensorParallelLayerSpec& spec = tp.layer_specs[i];
    const std::string key = fmt::format("tensor_parallel.partition_config.layer_specs[{}]", i);
    for (const std::string& pattern : spec.patterns) {
      if (text::valid_utf8(pattern) != pattern) throw Error(key + ".patterns: a pattern is not valid UTF-8", key + ".patterns");
      // Searched anywhere in the name (anchor with ^ and $), compiled by PCRE2 as Python's re reads it.
      const text::Regex regex(pattern, /*literal=*/false, key + ".patterns");
      bool matched = false;
      for (const HfTensor& t : tensors) {
        if (regex.find_all(t.name).empty()) continue;
        matched = true;
        const Split ours = split_of(t.name);
        const bool agrees = spec.row ? ours == Split::kRow : ours == Split::kColumn || ours == Split::kVocabulary;
        if (!agrees) {
          throw Error(fmt::format("{}: \"{}\" matches {}, which zerocpp splits {} (Megatron's layout for the Llama "
                                  "family); the spec asks for \"{}\"",
                                  key, pattern, t.name,
                                  ours == Split::kRow      ? "row-parallel"
                                  : ours == Split::kWhole  ? "not at all (whole on every rank)"
                                                           : "column-parallel",
                                  spec.row ? "row" : "column"),
                      key + ".partition_type");
        }
      }
      if (!matched) {
        throw Error(fmt::format("{}.patterns: \"{}\" matches no parameter of the model ({} of them, e.g. {})", key,
                                pattern, tensors.size(), tensors.empty() ? "" : tensors.front().name),
                    key + ".patterns");
      }
    }
  }
}

}  // namespace zero::llama
