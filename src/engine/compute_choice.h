// Where a bf16 model's matrix work runs on this CPU (zero/compute.h), chosen once as the engine
// starts: "zerocpp": {"bf16_compute"} in the config, ZERO_BF16_COMPUTE over it, and "auto"
// decided by the CPU's instructions (CPUID, util/cpu_features.h: LibTorch 1.13's bf16 matmul is
// fast only through oneDNN's AVX512-BF16 and AMX-BF16 kernels).
#pragma once

#include <string>
#include <vector>

#include "util/cpu_features.h"
#include "zero/config.h"

namespace zero::engine {

struct ComputeChoice {
  bool bf16_in_fp32 = false;
  Bf16Compute asked = Bf16Compute::kAuto;  // what the config or the environment said
  std::string asked_by;                    // "" (the default), "the config" or "ZERO_BF16_COMPUTE"
};

// `env`: ZERO_BF16_COMPUTE's value or null; `every_cpu_native`: whether every rank's CPU has bf16
// instructions ("auto" takes one path on all ranks, so that where ranks run does not change the
// trajectory; the slowest rank sets the pace anyway). Throws zero::Error naming the variable on a
// bad value.
ComputeChoice choose_bf16_compute(Bf16Compute configured, const char* env, bool every_cpu_native);

// What rank 0 prints at start: its CPU and the path bf16 matrix work takes, in one line; a warning
// line when bf16 kernels were forced on a CPU without bf16 instructions. `model_is_bf16`: whether
// that warning applies to this run (the path is named either way, for the user's next run).
std::vector<std::string> describe_compute(const ComputeChoice& choice, const CpuFeatures& cpu, bool every_cpu_native,
                                          bool model_is_bf16);

}  // namespace zero::engine
