// The GPT as zero-train's loop sees it (models/common/trainable_model.h): built fresh (under
// zero::Init at stage 3) or from an llm.c checkpoint, exported as an llm.c checkpoint.
#pragma once

#include <memory>
#include <string>

#include "models/common/trainable_model.h"
#include "models/gpt/llmc_files.h"

namespace zero {
class Config;
}

namespace zero::gpt {

struct Gpt;

// `init`: an llm.c checkpoint already read (its shape wins), or nullptr for a fresh model of
// `shape` from torch's global generator. `partitioned`: as make_llama's.
std::unique_ptr<models::TrainableModel> make_gpt(const GptShape& shape, const LlmcCheckpoint* init,
                                                 const std::string& init_path, const Config& config, World& world,
                                                 bool partitioned = true);

}  // namespace zero::gpt
