#include <gtest/gtest.h>

#include "config_test_util.h"

using namespace zero;

TEST(ConfigSeeds, QuickStartZero3) {
  AutoContext ctx{.world_size = 4, .hidden_size = 4096};
  Config c = Config::from_file(example_config("ds_zero3.json"), ctx);
  EXPECT_TRUE(c.bf16);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_TRUE(c.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::kCpu);
  EXPECT_TRUE(c.zero.overlap_comm);
  EXPECT_EQ(c.zero.sub_group_size, 1'000'000'000);
  EXPECT_EQ(c.zero.reduce_bucket_size, 4096 * 4096);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 15099494);  // floor(0.9 * 4096^2)
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 40960);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 1'000'000'000);
  EXPECT_TRUE(c.zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(c.gradient_accumulation_steps, 4);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 1);
  EXPECT_EQ(c.train_batch_size, 16);  // 1 * 4 * 4 ranks
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.optimizer.type, OptimizerType::kNone);
  EXPECT_TRUE(c.unresolved().empty());
  EXPECT_TRUE(c.resolved());
  EXPECT_EQ(source_of(c, "zero_optimization.reduce_bucket_size"), ValueSource::kAuto);
  EXPECT_EQ(source_of(c, "train_batch_size"), ValueSource::kAuto);
  EXPECT_EQ(source_of(c, "zero_optimization.stage"), ValueSource::kFile);
  EXPECT_EQ(source_of(c, "zero_optimization.allgather_bucket_size"), ValueSource::kDefault);
}

TEST(ConfigSeeds, PatternA) {
  Config c = Config::from_file(example_config("pattern_a_zero3_offload.json"), {.world_size = 8});
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 2'000'000'000);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 500'000'000);
  EXPECT_EQ(c.zero.reduce_bucket_size, 500'000'000);  // default
  EXPECT_EQ(c.train_batch_size, 64);                  // 1 * 8 * 8
  EXPECT_EQ(c.optimizer.type, OptimizerType::kAdamW);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 2e-5);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.999);
  EXPECT_TRUE(c.optimizer.adam_w_mode);
}

TEST(ConfigSeeds, PatternB) {
  Config c = Config::from_file(example_config("pattern_b_zero2.json"), {.world_size = 32});
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_TRUE(c.zero.overlap_comm);
  EXPECT_EQ(c.zero.reduce_bucket_size, 200'000'000);
  EXPECT_EQ(c.zero.allgather_bucket_size, 200'000'000);
  EXPECT_EQ(c.train_batch_size, 128);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_FALSE(c.activation_checkpointing.partition_activations);
}

TEST(ConfigSeeds, PatternCTakesTensorAndPipelineParallelism) {
  // The seed's pattern C verbatim: 8 stages × 8 tensor-parallel ranks, so at 64 ranks one
  // data-parallel rank, and the batch 1 × 16 micro-batches.
  Config pattern_c = Config::parse_file(example_config("pattern_c_3d.json"));
  EXPECT_EQ(pattern_c.tensor_parallel.size, 8);
  EXPECT_EQ(pattern_c.pipeline.stages, 8);
  EXPECT_EQ(pattern_c.pipeline.key, "pipeline_parallel.pp_size");
  pattern_c.resolve({.world_size = 64});
  EXPECT_EQ(pattern_c.world_size, 1);
  EXPECT_EQ(pattern_c.train_batch_size, 16);
  // DeepSpeed's own block says the same; sizes that disagree, or do not divide, are refused.
  Config block = Config::parse(R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4,
                                   "pipeline": {"stages": 2, "partition": "type:DecoderLayer", "activation_checkpoint_interval": 1,
                                                "pipe_partitioned": false}})");
  EXPECT_EQ(block.pipeline.stages, 2);
  EXPECT_EQ(block.pipeline.partition_method, "type:DecoderLayer");
  EXPECT_EQ(block.pipeline.activation_checkpoint_interval, 1);
  EXPECT_FALSE(block.pipeline.pipe_partitioned);
  EXPECT_TRUE(block.pipeline.grad_partitioned);
  block.resolve({.world_size = 6});
  EXPECT_EQ(block.world_size, 3);
  try {
    Config::parse(R"({"train_batch_size": 8, "pipeline": {"stages": 4}, "pipeline_parallel": {"pp_size": 2}})");
    FAIL() << "two sizes";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.problems()[0], "pipeline.stages: 4 differs from pipeline_parallel.pp_size = 2") << e.what();
  }
  Config odd = Config::parse(R"({"train_micro_batch_size_per_gpu": 1, "pipeline_parallel": {"pp_size": 4}, "tensor_parallel": {"tp_size": 2}})");
  try {
    odd.resolve({.world_size = 12});
    FAIL() << "12 ranks as 2 x 4";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.problems()[0], "pipeline_parallel.pp_size: 4 stages do not divide the world size 12 into 6 tensor-parallel groups")
        << e.what();
  }
  Config stage3 = Config::parse(R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}, "pipeline_parallel": {"pp_size": 2}})");
  EXPECT_THROW(stage3.resolve({.world_size = 4}), ConfigError);
  EXPECT_THROW(Config::parse(R"({"train_batch_size": 8, "pipeline": {"partition": "balanced"}})"), ConfigError);
  // Its tensor_parallel block alone: tp_size 8, the batch counted over world ÷ 8 ranks.
  Config tp = Config::parse(R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4,
                                "tensor_parallel": {"tp_size": 8}})");
  EXPECT_EQ(tp.tensor_parallel.size, 8);
  tp.resolve({.world_size = 32});
  EXPECT_EQ(tp.world_size, 4);
  EXPECT_EQ(tp.train_batch_size, 16);
  Config uneven = Config::parse(R"({"train_micro_batch_size_per_gpu": 1, "tensor_parallel": {"tp_size": 8}})");
  try {
    uneven.resolve({.world_size = 12});
    FAIL() << "a world of 12 split by 8";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems().size(), 1u) << e.what();
    EXPECT_EQ(e.problems()[0], "tensor_parallel.tp_size: 8 does not divide the world size 12");
  }
  // Without model parallelism DeepSpeed takes partition_activations and changes nothing: so does zerocpp.
  const Config c = Config::parse(R"({"train_batch_size": 8, "activation_checkpointing": {"partition_activations": true}})");
  EXPECT_TRUE(c.activation_checkpointing.partition_activations);
  ASSERT_FALSE(c.warnings().empty());
  EXPECT_EQ(c.warnings().back().rfind("activation_checkpointing.partition_activations: no effect", 0), 0u)
      << c.warnings().back();
  // With tensor parallelism it splits the checkpointed activations: nothing to warn about.
  const Config split = Config::parse(
      R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 2}, "activation_checkpointing": {"partition_activations": true}})");
  for (const std::string& w : split.warnings()) EXPECT_EQ(w.find("partition_activations"), std::string::npos) << w;
}

TEST(ConfigFeatures, MoqAndEigenvalueEnabledAreRefusedByName) {
  for (const char* key : {"quantize_training", "eigenvalue"}) {
    try {
      Config::parse(std::string(R"({"train_batch_size": 8, ")") + key + R"(": {"enabled": true}})");
      ADD_FAILURE() << key << " enabled was accepted";
    } catch (const ConfigError& e) {
      ASSERT_EQ(e.problems().size(), 1u) << e.what();
      EXPECT_EQ(e.problems()[0].rfind(std::string(key) + ": ", 0), 0u) << e.problems()[0];
      EXPECT_NE(e.problems()[0].find("not supported by zerocpp"), std::string::npos) << e.problems()[0];
    }
    // Switched off: accepted, with a warning.
    EXPECT_NO_THROW(Config::parse(std::string(R"({"train_batch_size": 8, ")") + key + R"(": {"enabled": false}})"));
  }
}

TEST(ConfigSeeds, SecondSeedZero2Block) {
  // A zero_optimization-only block: the trainer's micro batch completes the triad.
  Config c = Config::from_file(example_config("seed2_zero2_offload.json"), {.world_size = 8, .micro_batch_size = 2});
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_TRUE(c.zero.allgather_partitions);
  EXPECT_TRUE(c.zero.reduce_scatter);
  EXPECT_EQ(c.zero.reduce_bucket_size, 200'000'000);
  EXPECT_EQ(c.train_batch_size, 16);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
}

TEST(ConfigDefaults, EmptyObjectHasDeepSpeedDefaults) {
  Config c = Config::parse("{\"train_batch_size\": 8}");
  c.resolve({.world_size = 2});
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_FALSE(c.zero.overlap_comm);
  EXPECT_TRUE(c.zero.contiguous_gradients);
  EXPECT_EQ(c.zero.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 100'000);
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_EQ(c.steps_per_print, 10);
  EXPECT_EQ(c.aio.block_size, 1'048'576);
  EXPECT_EQ(c.aio.queue_depth, 8);
  EXPECT_EQ(c.checkpoint.tag_validation, TagValidation::kWarn);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.seed, 1234);
}

TEST(ConfigDefaults, OverlapCommDefaultFollowsStage) {
  EXPECT_TRUE(Config::parse(R"({"zero_optimization": {"stage": 3}})").zero.overlap_comm);
  EXPECT_FALSE(Config::parse(R"({"zero_optimization": {"stage": 2}})").zero.overlap_comm);
  EXPECT_FALSE(Config::parse(R"({"zero_optimization": {"stage": 3, "overlap_comm": false}})").zero.overlap_comm);
}

TEST(ConfigParse, IntegersInExponentForm) {
  Config c = Config::parse(R"({"zero_optimization": {"reduce_bucket_size": 5e8, "allgather_bucket_size": 2.5e3}})");
  EXPECT_EQ(c.zero.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(c.zero.allgather_bucket_size, 2500);
}

TEST(ConfigParse, DeprecatedAliasesWarn) {
  Config c = Config::parse(R"({
    "bfloat16": {"enabled": true},
    "zero_optimization": {"stage": 3, "cpu_offload": true, "cpu_offload_param": true,
                          "stage3_gather_fp16_weights_on_model_save": true}})");
  EXPECT_TRUE(c.bf16);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::kCpu);
  EXPECT_TRUE(c.zero.stage3_gather_16bit_weights_on_model_save);
  ASSERT_EQ(c.warnings().size(), 4u);
  EXPECT_NE(c.warnings()[0].find("bfloat16 is deprecated"), std::string::npos);
  EXPECT_EQ(source_of(c, "zero_optimization.offload_optimizer.device"), ValueSource::kAlias);
}

TEST(ConfigParse, OptimizerTypesAndDefaults) {
  Config lion = Config::parse(R"({"optimizer": {"type": "lion"}})");
  EXPECT_EQ(lion.optimizer.type, OptimizerType::kLion);
  EXPECT_DOUBLE_EQ(lion.optimizer.lr, 1e-4);
  EXPECT_DOUBLE_EQ(lion.optimizer.beta2, 0.99);
  Config adagrad = Config::parse(R"({"optimizer": {"type": "Adagrad"}})");
  EXPECT_DOUBLE_EQ(adagrad.optimizer.lr, 1e-2);
  EXPECT_DOUBLE_EQ(adagrad.optimizer.eps, 1e-10);
  Config adam =
      Config::parse(R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false, "weight_decay": 0.1}}})");
  EXPECT_FALSE(adam.optimizer.adam_w_mode);
  EXPECT_DOUBLE_EQ(adam.optimizer.weight_decay, 0.1);
  Config sgd = Config::parse(R"({"zero_allow_untested_optimizer": true, "zero_optimization": {"stage": 1},
                                 "optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true}}})");
  EXPECT_EQ(sgd.optimizer.type, OptimizerType::kSgd);
  EXPECT_TRUE(sgd.optimizer.nesterov);
}

TEST(ConfigParse, Schedulers) {
  Config one =
      Config::parse(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3,
                                  "cycle_first_step_size": 100}}})");
  EXPECT_EQ(one.scheduler.type, SchedulerType::kOneCycle);
  EXPECT_EQ(one.scheduler.cycle_second_step_size, 100);  // defaults to the first
  Config cos = Config::parse(R"({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 1000}}})");
  EXPECT_EQ(cos.scheduler.total_num_steps, 1000);
  EXPECT_DOUBLE_EQ(cos.scheduler.cos_min_ratio, 1e-4);
  Config decay = Config::parse(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 50,
                                    "warmup_type": "linear", "warmup_num_steps": 5}}})");
  EXPECT_EQ(decay.scheduler.warmup_type, "linear");
  EXPECT_EQ(decay.scheduler.warmup_num_steps, 5);
}

TEST(ConfigParse, SwitchedOffUnsupportedFeatureIsAcceptedWithWarning) {
  Config c = Config::parse(R"({"amp": {"enabled": false}, "progressive_layer_drop": {"enabled": false}})");
  EXPECT_EQ(c.warnings(), (std::vector<std::string>{"progressive_layer_drop: switched off; zerocpp does not have "
                                                    "progressive layer drop",
                                                    "amp: switched off; zerocpp does not have apex AMP (use fp16 or bf16)"}));
}

TEST(ConfigParse, NetworkMonitorsWarn) {
  Config c = Config::parse(R"({"wandb": {"enabled": true, "project": "x"}, "tensorboard": {"enabled": true,
                               "output_path": "tb/"}})");
  EXPECT_TRUE(c.tensorboard.enabled);
  EXPECT_EQ(c.tensorboard.output_path, "tb/");
  ASSERT_EQ(c.warnings().size(), 1u);
  EXPECT_NE(c.warnings()[0].find("wandb.enabled"), std::string::npos);
}

// DeepSpeed's rules for what it does not know (docs/config.md, "Unknown keys and auto").
TEST(ConfigRules, UnknownKeysWhereDeepSpeedReadsKeyByKeyAreWarnedAbout) {
  Config c = Config::parse(R"({"train_batch_size": 8, "_comment": "x", "cuda_visible_devices": "0,1",
                               "fp16": {"enabled": false, "opt_level": "O2"}})");
  EXPECT_EQ(c.warnings(), (std::vector<std::string>{"fp16.opt_level: unknown key, ignored, as DeepSpeed does",
                                                    "cuda_visible_devices: unknown key, ignored, as DeepSpeed does"}));
}

TEST(ConfigRules, StrictModeRefusesEveryUnknownKeyAndUnresolvedAuto) {
  const std::string text = R"({"train_batch_size": 8, "log": {"level": 1},
                               "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": "auto"}})";
  EXPECT_NO_THROW(Config::parse(text));
  for (const std::string& strict_text : {text, R"({"zerocpp": {"strict": true}, )" + text.substr(1)}) {
    try {
      Config::parse(strict_text, "t.json", strict_text == text);
      FAIL() << "strict mode accepted " << strict_text;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.problems(),
                (std::vector<std::string>{
                    "zero_optimization.stage3_gather_16bit_weights_on_model_save: \"auto\" has no resolution rule here "
                    "(strict mode: give a value)",
                    "log: unknown key (DeepSpeed ignores it; strict mode refuses it)"}));
    }
  }
}

TEST(ConfigRules, AutoWithNoRuleTakesDeepSpeedsDefault) {
  Config c = Config::parse(R"({"train_batch_size": 8, "zero_allow_untested_optimizer": "auto",
                               "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": "auto",
                                                     "offload_optimizer": {"device": "auto"}}})");
  EXPECT_FALSE(c.zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_FALSE(c.zero_allow_untested_optimizer);
  EXPECT_EQ(c.zero.offload_optimizer.device, OffloadDevice::kNone);
  EXPECT_EQ(source_of(c, "zero_optimization.offload_optimizer.device"), zero::ValueSource::kAutoDefault);
  EXPECT_EQ(c.warnings().size(), 3u);
  EXPECT_EQ(c.warnings()[0], "zero_allow_untested_optimizer: \"auto\" with no rule to resolve it: DeepSpeed's default "
                             "false applies");
}

TEST(ConfigRules, StageThreeFieldsByNameOrAlias) {
  Config named = Config::parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
      "max_live_parameters": 7, "max_reuse_distance": 8, "prefetch_bucket_size": 9, "param_persistence_threshold": 10,
      "model_persistence_threshold": 11, "gather_16bit_weights_on_model_save": true}})");
  Config aliased = Config::parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
      "stage3_max_live_parameters": 7, "stage3_max_reuse_distance": 8, "stage3_prefetch_bucket_size": 9,
      "stage3_param_persistence_threshold": 10, "stage3_model_persistence_threshold": 11,
      "stage3_gather_16bit_weights_on_model_save": true}})");
  for (const Config* c : {&named, &aliased}) {
    EXPECT_EQ(c->zero.stage3_max_live_parameters, 7);
    EXPECT_EQ(c->zero.stage3_max_reuse_distance, 8);
    EXPECT_EQ(c->zero.stage3_prefetch_bucket_size, 9);
    EXPECT_EQ(c->zero.stage3_param_persistence_threshold, 10);
    EXPECT_EQ(c->zero.stage3_model_persistence_threshold, 11);
    EXPECT_TRUE(c->zero.stage3_gather_16bit_weights_on_model_save);
    EXPECT_TRUE(c->warnings().empty());
  }
}

TEST(ConfigRules, BooleanZeroOptimizationIsStageOneOrZero) {
  Config on = Config::parse(R"({"train_batch_size": 8, "zero_optimization": true, "allgather_size": 1000})");
  EXPECT_EQ(on.zero.stage, 1);
  EXPECT_EQ(on.zero.allgather_bucket_size, 1000);
  EXPECT_EQ(on.warnings(), (std::vector<std::string>{"zero_optimization: the boolean form is deprecated: use "
                                                     "{\"stage\": 1}"}));
  EXPECT_EQ(Config::parse(R"({"train_batch_size": 8, "zero_optimization": false})").zero.stage, 0);
}

TEST(ConfigRules, ZeroSizesAndOffloadBelowItsStage) {
  Config c = Config::parse(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_size": 0,
      "allgather_bucket_size": 0, "sub_group_size": 0, "offload_param": {"device": "cpu"}}})");
  EXPECT_EQ(c.zero.reduce_bucket_size, 0);
  EXPECT_EQ(c.zero.sub_group_size, 0);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::kNone);  // switched off, as DeepSpeed ignores it
  EXPECT_EQ(c.warnings(), (std::vector<std::string>{"zero_optimization.offload_param: ignored at stage 2 (parameters "
                                                    "are offloaded at stage 3 only), as DeepSpeed does"}));
}

TEST(ConfigRules, CompileAndAutotuningAreWarnings) {
  Config c = Config::parse(R"({"train_batch_size": 8, "compile": {"deepcompile": true},
                               "autotuning": {"enabled": true, "fast": true}})");
  ASSERT_EQ(c.warnings().size(), 2u);
  EXPECT_NE(c.warnings()[0].find("autotuning"), std::string::npos);
  EXPECT_NE(c.warnings()[1].find("compile"), std::string::npos);
}

TEST(ConfigRules, NullIsTheDefaultWhereDeepSpeedsFieldIsOptional) {
  Config c = Config::parse(R"({"train_batch_size": 8, "communication_data_type": null, "aio": null,
      "zero_optimization": {"stage": 3, "overlap_comm": null, "offload_param": null, "offload_optimizer": null}})");
  EXPECT_TRUE(c.zero.overlap_comm);
  EXPECT_EQ(c.zero.offload_param.device, OffloadDevice::kNone);
  EXPECT_EQ(c.communication_data_type, CommDType::kModel);
  EXPECT_TRUE(c.warnings().empty());
}

TEST(ConfigRules, WhatDeepSpeedReadsFirstOrDrops) {
  // bf16 before bfloat16; cpu_offload_use_pin_memory warned about and dropped; a short unknown
  // key two edits from a known one (fp32 / fp16) is not taken for it.
  Config c = Config::parse(R"({"train_batch_size": 8, "bf16": {"enabled": false}, "bfloat16": {"enabled": true},
      "fp32": {"enabled": true}, "weight_quantization": {"enabled": false, "num_bits": 8},
      "zero_optimization": {"stage": 2, "cpu_offload_use_pin_memory": true}})");
  EXPECT_FALSE(c.bf16);
  EXPECT_FALSE(c.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(c.warnings(), (std::vector<std::string>{
                              "bfloat16: ignored, as DeepSpeed does, since bf16 is given",
                              "zero_optimization.cpu_offload_use_pin_memory is deprecated and ignored, as DeepSpeed "
                              "does: use offload_*.pin_memory",
                              "fp32: unknown key, ignored, as DeepSpeed does"}));
  EXPECT_THROW(Config::parse(R"({"communication_data_type": "model"})"), ConfigError);  // not one of DeepSpeed's
}

// zerocpp's own "bf16_compute" (docs/precision.md): auto by default, either path on request.
TEST(ValidConfig, Bf16ComputeIsAutoUnlessTheZerocppBlockSaysOtherwise) {
  EXPECT_EQ(zero::Config::parse("{}").bf16_compute, zero::Bf16Compute::kAuto);
  EXPECT_EQ(zero::Config::parse(R"({"zerocpp": {"bf16_compute": "fp32"}})").bf16_compute, zero::Bf16Compute::kFp32);
  EXPECT_EQ(zero::Config::parse(R"({"zerocpp": {"bf16_compute": "native"}})").bf16_compute, zero::Bf16Compute::kNative);
}
