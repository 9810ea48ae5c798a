// zero-ckpt consolidate (DeepSpeed's zero_to_fp32, built in): a checkpoint's weights, whole, in
// one file — safetensors (fp32, bf16 or fp16) or an llm.c GPT-2 checkpoint (fp32). Streaming: one
// parameter is read, converted and written at a time, so memory stays near the largest tensor,
// never the model. Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace zero::checkpoint {

enum class OutputFormat { kSafetensors, kLlmc };
enum class OutputDtype { kFp32, kBf16, kFp16 };

struct ConsolidateOptions {
  std::string dir, tag;  // tag empty: DIR/latest
  std::string out;
  OutputFormat format = OutputFormat::kSafetensors;
  OutputDtype dtype = OutputDtype::kFp32;
};

struct ConsolidateResult {
  int64_t tensors = 0, elements = 0;
  int64_t largest_tensor = 0;  // elements of the largest parameter (what memory follows)
};

ConsolidateResult consolidate(const ConsolidateOptions& options);

}  // namespace zero::checkpoint
