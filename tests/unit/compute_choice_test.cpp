// Where bf16 matrix work runs (engine/compute_choice.h): the config's "bf16_compute", the
// environment over it, "auto" by the CPUs, and what rank 0 says about it.
#include "engine/compute_choice.h"

#include <gtest/gtest.h>

#include "zero/error.h"

namespace {

using zero::Bf16Compute;
using zero::engine::choose_bf16_compute;

TEST(Bf16ComputeChoice, AutoFollowsTheCpusAndAnAnswerOverridesThem) {
  EXPECT_FALSE(choose_bf16_compute(Bf16Compute::kAuto, nullptr, true).bf16_in_fp32);
  EXPECT_TRUE(choose_bf16_compute(Bf16Compute::kAuto, nullptr, false).bf16_in_fp32);
  EXPECT_TRUE(choose_bf16_compute(Bf16Compute::kFp32, nullptr, true).bf16_in_fp32);
  EXPECT_FALSE(choose_bf16_compute(Bf16Compute::kNative, nullptr, false).bf16_in_fp32);
  EXPECT_EQ(choose_bf16_compute(Bf16Compute::kFp32, nullptr, true).asked_by, "the config");
  EXPECT_EQ(choose_bf16_compute(Bf16Compute::kAuto, nullptr, true).asked_by, "");
}

TEST(Bf16ComputeChoice, TheEnvironmentWinsOverTheConfig) {
  EXPECT_TRUE(choose_bf16_compute(Bf16Compute::kNative, "fp32", true).bf16_in_fp32);
  EXPECT_FALSE(choose_bf16_compute(Bf16Compute::kFp32, "NATIVE", false).bf16_in_fp32);
  EXPECT_TRUE(choose_bf16_compute(Bf16Compute::kNative, "auto", false).bf16_in_fp32);
  EXPECT_EQ(choose_bf16_compute(Bf16Compute::kNative, "fp32", true).asked_by, "ZERO_BF16_COMPUTE");
  // Empty: as if unset.
  EXPECT_FALSE(choose_bf16_compute(Bf16Compute::kNative, "", false).bf16_in_fp32);
  try {
    choose_bf16_compute(Bf16Compute::kAuto, "bf16", true);
    FAIL() << "a bad value was accepted";
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.subject(), "ZERO_BF16_COMPUTE");
    EXPECT_NE(std::string(e.what()).find("ZERO_BF16_COMPUTE=bf16: expected auto, native or fp32"), std::string::npos)
        << e.what();
  }
}

TEST(Bf16ComputeChoice, RankZeroNamesTheCpuAndThePathInOneLine) {
  zero::CpuFeatures avx2;
  avx2.avx2 = true;
  zero::CpuFeatures bf16 = avx2;
  bf16.avx512f = bf16.avx512_bf16 = true;

  auto fallback = zero::engine::describe_compute(choose_bf16_compute(Bf16Compute::kAuto, nullptr, false), avx2, false, true);
  ASSERT_EQ(fallback.size(), 1u);
  EXPECT_EQ(fallback[0],
            "CPU avx2: bf16 matrix work runs in fp32 on widened copies of the bf16 weights (no AVX512-BF16 or "
            "AMX-BF16: LibTorch's bf16 matmul would run ~20x slower than fp32); parameters, gradients and "
            "communication stay bf16 (ZERO_BF16_COMPUTE=native forces bf16 kernels)");

  auto native = zero::engine::describe_compute(choose_bf16_compute(Bf16Compute::kAuto, nullptr, true), bf16, true, true);
  ASSERT_EQ(native.size(), 1u);
  EXPECT_EQ(native[0], "CPU avx2 avx512f avx512_bf16: bf16 matrix work runs in bf16 (AVX512-BF16); fp16 computes in "
                       "fp32 (LibTorch has no CPU fp16 kernels)");

  auto forced = zero::engine::describe_compute(choose_bf16_compute(Bf16Compute::kAuto, "fp32", true), bf16, true, true);
  ASSERT_EQ(forced.size(), 1u);
  EXPECT_NE(forced[0].find("in fp32 on widened copies of the bf16 weights (\"fp32\" from ZERO_BF16_COMPUTE);"),
            std::string::npos)
      << forced[0];

  // bf16 kernels forced where one rank's CPU has none: a warning besides.
  auto slow = zero::engine::describe_compute(choose_bf16_compute(Bf16Compute::kNative, nullptr, false), bf16, false, true);
  ASSERT_EQ(slow.size(), 2u);
  EXPECT_EQ(slow[1].rfind("warning: a rank's CPU has no AVX512-BF16 or AMX-BF16", 0), 0u) << slow[1];
  // ... and none when the model is not bf16.
  EXPECT_EQ(zero::engine::describe_compute(choose_bf16_compute(Bf16Compute::kNative, nullptr, false), avx2, false, false)
                .size(),
            1u);
}

}  // namespace
