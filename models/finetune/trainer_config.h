// The DeepSpeed config as the Hugging Face Trainer's DeepSpeed integration hands it over
// (transformers' HfTrainerDeepSpeedConfig): "auto" filled from the Trainer's arguments, an
// explicit value that contradicts a flag given on the command line an error listing every such
// pair, the Trainer's AdamW when the config has no optimizer, and the Trainer's schedule when it
// has no scheduler.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/finetune/finetune.h"
#include "zero/config.h"

namespace zero::finetune {

// Step 1: the batch and precision flags after the config's explicit values (where their flag was
// not given); `notes` says where the config decided. Throws listing every contradiction.
TrainingArguments reconcile_with_config(const TrainingArguments& args, std::vector<std::string>& notes);

// Step 2: the resolved config for `world_size` ranks, given the run's optimizer step count.
// `trainer_optimizer`: set when the config had no optimizer and the Trainer's AdamW stands in.
Config trainer_config(const TrainingArguments& args, int world_size, int64_t hidden_size, int64_t max_steps,
                      int64_t warmup_steps, std::vector<std::string>& notes, bool& trainer_optimizer);

// The Trainer's warmup: warmup_steps when given, else ceil(warmup_ratio × max_steps).
int64_t trainer_warmup_steps(const TrainingArguments& args, int64_t max_steps);

}  // namespace zero::finetune
