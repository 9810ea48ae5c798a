// The readers of each block of a DeepSpeed config. Each reads its keys through an ObjectReader
// (so unknown keys are reported) and records problems in the shared Diagnostics.
#pragma once

#include "config/object_reader.h"
#include "zero/config.h"

namespace zero::config_detail {

void read_precision(ObjectReader& root, Config& config, Diagnostics& diag);  // fp16, bf16, bfloat16
void read_zero_optimization(ObjectReader& root, ZeroConfig& zero, Diagnostics& diag);
void read_aio(ObjectReader& root, AioConfig& aio);
void read_optimizer(ObjectReader& root, OptimizerConfig& optimizer, Diagnostics& diag);
void read_scheduler(ObjectReader& root, SchedulerConfig& scheduler, Diagnostics& diag);
void read_monitoring(ObjectReader& root, Config& config, Diagnostics& diag);  // monitors, profilers, checkpoint
void read_unsupported_features(ObjectReader& root, Diagnostics& diag);
void read_tensor_parallel(ObjectReader& root, TensorParallelConfig& tensor_parallel, Diagnostics& diag);
void read_pipeline(ObjectReader& root, PipelineConfig& pipeline, Diagnostics& diag);
void read_expert_parallel(ObjectReader& root, ExpertParallelConfig& expert_parallel, Diagnostics& diag);
// data_types.grad_accum_dtype, with DeepSpeed's spellings (fp16, float16, half, torch.float16, ...).
CommDType read_grad_accum_dtype(ObjectReader& data_types, Diagnostics& diag);
// Rules that involve more than one block (fp16 with bf16, offload with stage, ...). Switches off
// what DeepSpeed ignores (an offload block below its stage).
void check_cross_key_rules(Config& config, Diagnostics& diag);

}  // namespace zero::config_detail
