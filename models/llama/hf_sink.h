// `zero-ckpt consolidate --format hf`: a zerocpp checkpoint of a Llama-family model (trained by
// zero-train --model) written as a Hugging Face model directory, offline and streaming: one
// parameter's fp32 master is read, converted and written at a time. config.json comes from the
// checkpoint's client state (with torch_dtype set to what is written); the generation config and
// tokenizer files are copied from the model directory the run started from, when it is still there.
// Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "checkpoint/consolidate.h"

namespace zero::llama {

// dtype "": the dtype the run trained in (the checkpoint's model dtype); else fp32, bf16, fp16.
std::unique_ptr<checkpoint::ConsolidationSink> hf_sink(const std::string& out_dir, const std::string& dtype,
                                                        uint64_t max_shard_bytes);

}  // namespace zero::llama
