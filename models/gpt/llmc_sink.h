// `zero-ckpt consolidate --format llmc`: a zerocpp checkpoint of zero-train's GPT, whole, as an
// llm.c GPT-2 checkpoint (fp32, version 3). The GPT's part of consolidation (checkpoint/consolidate.h).
#pragma once

#include <memory>
#include <string>

#include "checkpoint/consolidate.h"

namespace zero::gpt {

std::unique_ptr<checkpoint::ConsolidationSink> llmc_sink(const std::string& out);

}  // namespace zero::gpt
