// zero-ckpt consolidate (DeepSpeed's zero_to_fp32, built in): a checkpoint's fp32 master weights,
// whole, into one file. Streaming: one parameter is read, converted and written at a time, so
// memory stays near the largest tensor, never the model. Torch-free.
//
// What the file looks like is a sink's business: safetensors here; a model adds its own format
// (the GPT's llm.c checkpoint: models/gpt/llmc_sink.h) without this layer knowing the model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/parts.h"

namespace zero::checkpoint {

enum class OutputDtype { kFp32, kBf16, kFp16 };

// Receives whole parameters, fp32, one at a time, in the order it asks for.
class ConsolidationSink {
 public:
  virtual ~ConsolidationSink() = default;
  // The saved parameters to write, as indices of `reader` (whole parameters: a tensor-parallel
  // checkpoint's slices joined, a pipeline's stages one after another), in file order; called
  // once, first.
  virtual std::vector<int> order(const WholeParameters& reader) = 0;
  virtual void append(int param, const std::vector<float>& values) = 0;
  virtual void finish() = 0;
};

// Every saved parameter in saved order, converted to `dtype` (round to nearest even).
std::unique_ptr<ConsolidationSink> safetensors_sink(const std::string& out, OutputDtype dtype);

struct ConsolidateResult {
  int64_t tensors = 0, elements = 0;
  int64_t largest_tensor = 0;  // elements of the largest parameter (what memory follows)
};

ConsolidateResult consolidate(WholeParameters& reader, ConsolidationSink& sink);

// The common case: DIR/TAG (tag empty: DIR/latest), in whatever stages and parts it was saved,
// into a safetensors file.
struct ConsolidateOptions {
  std::string dir, tag;
  std::string out;
  OutputDtype dtype = OutputDtype::kFp32;
};
ConsolidateResult consolidate(const ConsolidateOptions& options);

}  // namespace zero::checkpoint
