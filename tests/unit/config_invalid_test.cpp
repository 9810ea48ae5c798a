// A table of invalid configs: each must fail and name the right JSON path.
#include <gtest/gtest.h>

#include "config_test_util.h"

namespace {

struct InvalidCase {
  const char* name;
  const char* json;
  const char* path;      // the problem must start with "<path>: "
  const char* fragment;  // and contain this
};

const InvalidCase kCases[] = {
    // wrong types
    {"stage_string", R"({"zero_optimization": {"stage": "2"}})", "zero_optimization.stage", "expected an integer"},
    {"stage_float", R"({"zero_optimization": {"stage": 1.5}})", "zero_optimization.stage", "expected an integer"},
    {"bool_as_int", R"({"zero_optimization": {"overlap_comm": 1}})", "zero_optimization.overlap_comm", "true or false"},
    {"clip_string", R"({"gradient_clipping": "1.0"})", "gradient_clipping", "expected a number"},
    {"lr_string", R"({"optimizer": {"type": "AdamW", "params": {"lr": "fast"}}})", "optimizer.params.lr",
     "expected a number"},
    {"betas_scalar", R"({"optimizer": {"type": "Adam", "params": {"betas": 0.9}}})", "optimizer.params.betas",
     "[beta1, beta2]"},
    {"betas_three", R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9, 0.99, 0.1]}}})",
     "optimizer.params.betas", "two numbers"},
    {"beta_out_of_range", R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9, 1.5]}}})",
     "optimizer.params.betas[1]", "[0, 1)"},
    {"nvme_path_number",
     R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": 5}}})",
     "zero_optimization.offload_optimizer.nvme_path", "expected a string"},
    {"prof_ops_not_list", R"({"comms_logger": {"prof_ops": "all_reduce"}})", "comms_logger.prof_ops",
     "list of strings"},
    {"prof_ops_item", R"({"comms_logger": {"prof_ops": ["all_reduce", 3]}})", "comms_logger.prof_ops[1]",
     "expected a string"},
    {"steps_per_print_zero", R"({"steps_per_print": 0})", "steps_per_print", "expected an integer >= 1"},
    // negative, zero and out-of-range sizes
    {"stage_4", R"({"zero_optimization": {"stage": 4}})", "zero_optimization.stage", "[0, 3]"},
    {"stage_negative", R"({"zero_optimization": {"stage": -1}})", "zero_optimization.stage", "[0, 3]"},
    {"bucket_negative", R"({"zero_optimization": {"allgather_bucket_size": -5e8}})",
     "zero_optimization.allgather_bucket_size", ">= 0"},
    {"micro_batch_zero", R"({"train_micro_batch_size_per_gpu": 0})", "train_micro_batch_size_per_gpu", ">= 1"},
    {"train_batch_negative", R"({"train_batch_size": -8})", "train_batch_size", ">= 1"},
    {"gas_zero", R"({"train_batch_size": 8, "gradient_accumulation_steps": 0})", "gradient_accumulation_steps", ">= 1"},
    {"clip_negative", R"({"gradient_clipping": -1})", "gradient_clipping", ">= 0"},
    {"lr_negative", R"({"optimizer": {"type": "AdamW", "params": {"lr": -0.1}}})", "optimizer.params.lr", ">= 0"},
    {"queue_depth_zero", R"({"aio": {"queue_depth": 0}})", "aio.queue_depth", ">= 1"},
    {"loss_scale_window_zero", R"({"fp16": {"enabled": true, "loss_scale_window": 0}})", "fp16.loss_scale_window",
     ">= 1"},
    {"offload_ratio", R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 1.5}}})",
     "zero_optimization.offload_optimizer.ratio", "[0, 1]"},
    {"huge_integer", R"({"zero_optimization": {"reduce_bucket_size": 1e30}})", "zero_optimization.reduce_bucket_size",
     "expected an integer"},
    // unknown keys at every level, with suggestions
    {"unknown_top", R"({"train_batch_sizes": 8})", "train_batch_sizes", "did you mean \"train_batch_size\""},
    {"unknown_zero", R"({"zero_optimization": {"stgae": 2}})", "zero_optimization.stgae", "did you mean \"stage\""},
    {"unknown_offload", R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"devise": "cpu"}}})",
     "zero_optimization.offload_optimizer.devise", "did you mean \"device\""},
    {"unknown_optimizer_param", R"({"optimizer": {"type": "AdamW", "params": {"weight_decai": 0.1}}})",
     "optimizer.params.weight_decai", "did you mean \"weight_decay\""},
    {"unknown_scheduler_param", R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_steps": 10}}})",
     "scheduler.params.warmup_steps", "did you mean \"warmup_num_steps\""},
    {"unknown_fp16", R"({"fp16": {"enabled": true, "initial_scale": 8}})", "fp16.initial_scale",
     "did you mean \"initial_scale_power\""},
    {"unknown_aio", R"({"aio": {"blocksize": 4096}})", "aio.blocksize", "did you mean \"block_size\""},
    {"near_miss_checkpoint", R"({"checkpoint": {"tag_validaton": "Warn"}})", "checkpoint.tag_validaton",
     "did you mean \"tag_validation\""},
    {"unknown_data_types", R"({"data_types": {"grad_accum": "fp32"}})", "data_types.grad_accum", "unknown key"},
    {"lion_has_no_eps", R"({"optimizer": {"type": "Lion", "params": {"eps": 1e-8}}})", "optimizer.params.eps",
     "unknown key"},
    {"bf16_compute_choice", R"({"zerocpp": {"bf16_compute": "bf16"}})", "zerocpp.bf16_compute", "\"native\""},
    // cross-key rules
    {"fp16_and_bf16", R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})", "fp16.enabled",
     "cannot both be enabled"},
    {"max_grad_norm", R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "max_grad_norm": 1.0}}})",
     "optimizer.params.max_grad_norm", "gradient_clipping"},
    {"nvme_without_path", R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}})",
     "zero_optimization.offload_optimizer.nvme_path", "required"},
    {"nvme_param_without_path", R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})",
     "zero_optimization.offload_param.nvme_path", "required"},
    {"untested_optimizer", R"({"zero_optimization": {"stage": 1}, "optimizer": {"type": "SGD"}})", "optimizer.type",
     "zero_allow_untested_optimizer"},
    {"onebit_adam", R"({"optimizer": {"type": "OneBitAdam"}})", "optimizer.type", "1-bit Adam is not supported by zerocpp"},
    {"muadam", R"({"optimizer": {"type": "MuAdam"}})", "optimizer.type", "muP Adam is not supported by zerocpp"},
    {"unknown_lion_param", R"({"optimizer": {"type": "Lion", "params": {"use_triton": true}}})",
     "optimizer.params.use_triton", "unknown key"},
    {"amsgrad", R"({"optimizer": {"type": "Adam", "params": {"amsgrad": true}}})", "optimizer.params.amsgrad",
     "not supported by zerocpp"},
    {"alias_and_new",
     R"({"zero_optimization": {"stage": 2, "cpu_offload": true, "offload_optimizer": {"device": "cpu"}}})",
     "zero_optimization.cpu_offload", "keep only"},
    {"warmup_decay_without_total", R"({"scheduler": {"type": "WarmupDecayLR", "params": {}}})",
     "scheduler.params.total_num_steps", "required by WarmupDecayLR"},
    {"one_cycle_without_bounds", R"({"scheduler": {"type": "OneCycle", "params": {"cycle_max_lr": 1e-3}}})",
     "scheduler.params.cycle_min_lr", "required by OneCycle"},
    // bad enum strings
    {"bad_device", R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "gpu"}}})",
     "zero_optimization.offload_param.device", "\"none\", \"cpu\", \"nvme\""},
    {"bad_optimizer", R"({"optimizer": {"type": "AdamX"}})", "optimizer.type", "did you mean \"Adam"},
    {"bad_scheduler", R"({"scheduler": {"type": "Cosine"}})", "scheduler.type", "expected one of"},
    {"bad_comm_dtype", R"({"communication_data_type": "fp8"})", "communication_data_type", "expected one of"},
    {"bad_tag_validation", R"({"checkpoint": {"tag_validation": "Maybe"}})", "checkpoint.tag_validation",
     "\"Ignore\", \"Warn\", \"Fail\""},
    {"bad_warmup_type", R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cosine"}}})",
     "scheduler.params.warmup_type", "\"log\", \"linear\""},
    {"optimizer_without_type", R"({"optimizer": {"params": {"lr": 1e-3}}})", "optimizer.type", "missing"},
    // non-object blocks
    {"zero_block_number", R"({"zero_optimization": 2})", "zero_optimization", "expected an object"},
    {"fp16_block_bool", R"({"fp16": true})", "fp16", "expected an object"},
    {"optimizer_block_string", R"({"optimizer": "AdamW"})", "optimizer", "expected an object"},
    {"params_block_list", R"({"optimizer": {"type": "AdamW", "params": [1]}})", "optimizer.params",
     "expected an object"},
    {"offload_block_string", R"({"zero_optimization": {"stage": 2, "offload_optimizer": "cpu"}})",
     "zero_optimization.offload_optimizer", "expected an object"},
    // unsupported DeepSpeed features and ZeRO++ switches
    {"curriculum", R"({"curriculum_learning": {"enabled": true}})", "curriculum_learning",
     "curriculum learning is not supported by zerocpp"},
    {"curriculum_without_enabled", R"({"curriculum_learning": {"curriculum_type": "seqlen"}})",
     "curriculum_learning.enabled", "DeepSpeed fails without it"},
    {"pld", R"({"progressive_layer_drop": {"enabled": true, "theta": 0.5}})", "progressive_layer_drop",
     "not supported by zerocpp"},
    {"amp", R"({"amp": {"enabled": true, "opt_level": "O1"}})", "amp", "apex AMP (use fp16 or bf16)"},
    {"compression", R"({"compression_training": {"weight_quantization": {"shared_parameters": {"enabled": true}}}})",
     "compression_training", "not supported by zerocpp"},
    {"sparse_attention", R"({"sparse_attention": {"mode": "fixed"}})", "sparse_attention", "not supported by zerocpp"},
    {"autotp_twice", R"({"tensor_parallel": {"autotp_size": 2, "tp_size": 4}})", "tensor_parallel.tp_size",
     "4 differs from tensor_parallel.autotp_size = 2"},
    {"autotp_preset", R"({"tensor_parallel": {"autotp_size": 2, "preset_model": "bloom"}})",
     "tensor_parallel.preset_model", "knows llama, mistral and qwen2"},
    {"sequence_parallel_alone", R"({"zerocpp": {"sequence_parallel": true}})", "zerocpp.sequence_parallel",
     "needs tensor parallelism"},
    {"sequence_parallel", R"({"sequence_parallel_size": 4})", "sequence_parallel_size", "not supported by zerocpp"},
    {"elasticity", R"({"elasticity": {"enabled": true, "max_train_batch_size": 64}})", "elasticity",
     "elastic training is not supported"},
    {"mics", R"({"zero_optimization": {"stage": 3, "mics_shard_size": 8}})", "zero_optimization.mics_shard_size",
     "MiCS"},
    {"legacy_stage1", R"({"zero_optimization": {"stage": 1, "legacy_stage1": true}})",
     "zero_optimization.legacy_stage1", "remove the key"},
    {"alias_twice", R"({"zero_optimization": {"stage": 3, "max_live_parameters": 1, "stage3_max_live_parameters": 2}})",
     "zero_optimization.stage3_max_live_parameters", "given twice, also as max_live_parameters"},
    {"partial_offload_stage2", R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})",
     "zero_optimization.offload_optimizer.ratio", "needs stage 3"},
    {"top_level_near_miss", R"({"zero_optimisation": {"stage": 2}})", "zero_optimisation",
     "did you mean \"zero_optimization\""},
    {"top_level_word_subset", R"({"train_batch_size": 8, "accumulation_steps": 2})", "accumulation_steps",
     "did you mean \"gradient_accumulation_steps\""},
    {"int8_accumulation", R"({"data_types": {"grad_accum_dtype": "int8"}})", "data_types.grad_accum_dtype",
     "int8 gradient accumulation"},
    {"seq_comm_dtype", R"({"seq_parallel_comm_data_type": "fp8"})", "seq_parallel_comm_data_type", "expected one of"},
    {"quantized_nontrainable_weights", R"({"zero_optimization": {"stage": 3, "zero_quantized_nontrainable_weights": "yes"}})",
     "zero_optimization.zero_quantized_nontrainable_weights", "expected"},
    {"hpz_negative", R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": -2}})",
     "zero_optimization.zero_hpz_partition_size", "expected an integer >= 0"},
    {"gds", R"({"aio": {"use_gds": true}})", "aio.use_gds", "not supported by zerocpp"},
};

}  // namespace

class InvalidConfig : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidConfig, NamesThePath) {
  const InvalidCase& c = GetParam();
  try {
    zero::Config::parse(c.json, "bad.json");
    FAIL() << "accepted: " << c.json;
  } catch (const zero::ConfigError& e) {
    std::string prefix = std::string(c.path) + ": ";
    bool found = false;
    for (const auto& p : e.problems()) {
      if (p.rfind(prefix, 0) == 0 && p.find(c.fragment) != std::string::npos) found = true;
    }
    EXPECT_TRUE(found) << "expected a problem at " << c.path << " containing [" << c.fragment << "], got:\n"
                       << e.what();
    EXPECT_EQ(e.origin(), "bad.json");
  }
}

INSTANTIATE_TEST_SUITE_P(Table, InvalidConfig, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(InvalidConfigTable, HasAtLeastForty) { EXPECT_GE(std::size(kCases), 40u); }

TEST(InvalidConfigFile, MissingFileNamesThePath) {
  try {
    zero::Config::parse_file("/nonexistent/ds.json");
    FAIL();
  } catch (const zero::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/ds.json"), std::string::npos);
  }
}

TEST(InvalidConfigFile, TopLevelMustBeObject) { EXPECT_THROW(zero::Config::parse("[1, 2]"), zero::ConfigError); }

TEST(InvalidConfigFile, AllProblemsReportedAtOnce) {
  try {
    zero::Config::parse(R"({"zero_optimization": {"stage": 9, "stgae": 1}, "fp16": {"enabled": 2}})");
    FAIL();
  } catch (const zero::ConfigError& e) {
    EXPECT_EQ(e.problems().size(), 3u) << e.what();
  }
}
