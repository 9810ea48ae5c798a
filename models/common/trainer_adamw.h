// The AdamW a Hugging Face trainer builds when the DeepSpeed config has no "optimizer" block
// (torch.optim.AdamW from TrainingArguments), shared by zero-train and zero-finetune. Torch-free.
#pragma once

#include "zero/config.h"

namespace zero::models {

// Its values from the trainer's flags in `context`, transformers' defaults where one is absent.
inline OptimizerConfig trainer_adamw(const AutoContext& context) {
  OptimizerConfig a;
  a.type = OptimizerType::kAdamW;
  a.type_name = "AdamW";
  a.lr = context.learning_rate.value_or(5e-5);
  a.weight_decay = context.weight_decay.value_or(0.0);
  a.beta1 = context.adam_beta1.value_or(0.9);
  a.beta2 = context.adam_beta2.value_or(0.999);
  a.eps = context.adam_epsilon.value_or(1e-8);
  return a;
}

}  // namespace zero::models
