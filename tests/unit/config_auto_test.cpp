// The batch triad and "auto" resolution.
#include <gtest/gtest.h>

#include "config_test_util.h"

using namespace zero;

namespace {

std::string resolve_error(const std::string& json, const AutoContext& ctx) {
  Config c = Config::parse(json);
  try {
    c.resolve(ctx);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(BatchTriad, AnyTwoDetermineTheThird) {
  Config a = Config::parse(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})");
  a.resolve({.world_size = 4});
  EXPECT_EQ(a.gradient_accumulation_steps, 2);
  Config b = Config::parse(R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})");
  b.resolve({.world_size = 4});
  EXPECT_EQ(b.train_micro_batch_size_per_gpu, 4);
  Config c = Config::parse(R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2})");
  c.resolve({.world_size = 3});
  EXPECT_EQ(c.train_batch_size, 18);
  EXPECT_EQ(source_of(c, "train_batch_size"), ValueSource::kAuto);
  EXPECT_EQ(source_of(c, "gradient_accumulation_steps"), ValueSource::kFile);
}

TEST(BatchTriad, ResolveAgainAtAnotherWorldSize) {
  Config c = Config::parse(R"({"train_micro_batch_size_per_gpu": 2})");
  c.resolve({.world_size = 2});
  EXPECT_EQ(c.train_batch_size, 4);
  c.resolve({.world_size = 3});
  EXPECT_EQ(c.train_batch_size, 6);
}

TEST(BatchTriad, InconsistentIsAnError) {
  std::string e = resolve_error(R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 2,
                                     "gradient_accumulation_steps": 2})",
                                {.world_size = 2});
  EXPECT_NE(e.find("train_batch_size: 10 != train_micro_batch_size_per_gpu 2 * gradient_accumulation_steps 2 * world "
                   "size 2 = 8"),
            std::string::npos)
      << e;
  e = resolve_error(R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4})", {.world_size = 2});
  EXPECT_NE(e.find("not divisible"), std::string::npos) << e;
  e = resolve_error(R"({"gradient_accumulation_steps": 4})", {.world_size = 2});
  EXPECT_NE(e.find("either train_batch_size or train_micro_batch_size_per_gpu"), std::string::npos) << e;
}

TEST(AutoValues, FromTheTrainerFlags) {
  Config c = Config::parse(R"({
    "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "train_batch_size": "auto",
    "gradient_clipping": "auto",
    "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                  "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto"}})");
  EXPECT_EQ(c.unresolved().size(), 17u);
  c.resolve({.world_size = 2,
             .hidden_size = 64,
             .micro_batch_size = 8,
             .gradient_accumulation_steps = 2,
             .learning_rate = 3e-4,
             .weight_decay = 0.1,
             .adam_beta1 = 0.8,
             .adam_beta2 = 0.95,
             .adam_epsilon = 1e-6,
             .max_grad_norm = 0.5,
             .warmup_steps = 10,
             .max_steps = 100,
             .fp16 = false,
             .bf16 = true});
  EXPECT_TRUE(c.unresolved().empty());
  EXPECT_EQ(c.train_batch_size, 32);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 0.5);
  EXPECT_TRUE(c.bf16);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 3e-4);
  EXPECT_EQ(c.scheduler.warmup_num_steps, 10);
  EXPECT_EQ(c.scheduler.total_num_steps, 100);
  EXPECT_EQ(c.zero.reduce_bucket_size, 4096);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 3686);
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 640);
  EXPECT_EQ(value_of(c, "optimizer.params.betas"), "[0.8,0.95]");
}

TEST(AutoValues, MissingContextNamesTheKeyAndWhatItNeeds) {
  std::string e = resolve_error(R"({"train_batch_size": 8, "zero_optimization": {"reduce_bucket_size": "auto"}})",
                                {.world_size = 1});
  EXPECT_NE(
      e.find("zero_optimization.reduce_bucket_size: \"auto\" cannot be resolved: it needs the model's hidden size"),
      std::string::npos)
      << e;
}

TEST(AutoValues, AllowUnresolvedKeepsThemListed) {
  Config c = Config::parse(R"({"train_batch_size": 8, "zero_optimization": {"reduce_bucket_size": "auto"}})");
  c.resolve({.world_size = 1, .allow_unresolved = true});
  ASSERT_EQ(c.unresolved().size(), 1u);
  EXPECT_EQ(c.unresolved()[0], "zero_optimization.reduce_bucket_size");
  EXPECT_FALSE(c.resolved());
}

TEST(AutoValues, AutoPrecisionStillRejectsBoth) {
  std::string e = resolve_error(R"({"train_batch_size": 8, "fp16": {"enabled": "auto"}, "bf16": {"enabled": true}})",
                                {.world_size = 1, .fp16 = true});
  EXPECT_NE(e.find("fp16.enabled: fp16 and bf16 cannot both be enabled"), std::string::npos) << e;
}

TEST(BatchTriad, ResolvingAgainDoesNotRepeatWarnings) {
  Config c = Config::parse(R"({"bfloat16": {"enabled": true}, "train_micro_batch_size_per_gpu": 2})");
  c.resolve({.world_size = 1, .micro_batch_size = 4});  // the file's 2 overrides the trainer's 4: a warning
  ASSERT_EQ(c.warnings().size(), 2u);                     // the alias, and the override
  c.resolve({.world_size = 2, .micro_batch_size = 4});
  EXPECT_EQ(c.warnings().size(), 2u);
}

TEST(ConfigAuto, StageThreeSizesResolveUnderEitherSpelling) {
  for (const char* prefix : {"", "stage3_"}) {
    const std::string text = std::string(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, ")") + prefix +
                             R"(prefetch_bucket_size": "auto", ")" + prefix + R"(param_persistence_threshold": "auto"}})";
    Config c = Config::parse(text);
    c.resolve({.world_size = 2, .hidden_size = 100});
    EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 9000) << prefix;
    EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 1000) << prefix;
  }
}
