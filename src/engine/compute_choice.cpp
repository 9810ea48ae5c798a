#include "engine/compute_choice.h"

#include <algorithm>
#include <cctype>

#include "zero/error.h"

namespace zero::engine {

ComputeChoice choose_bf16_compute(Bf16Compute configured, const char* env, bool every_cpu_native) {
  ComputeChoice choice;
  choice.asked = configured;
  if (configured != Bf16Compute::kAuto) choice.asked_by = "the config";
  if (env && *env) {
    std::string value = env;
    std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) { return std::tolower(c); });
    const auto paths = {Bf16Compute::kAuto, Bf16Compute::kNative, Bf16Compute::kFp32};
    const auto named = std::find_if(paths.begin(), paths.end(), [&](Bf16Compute p) { return value == to_string(p); });
    if (named == paths.end()) {
      throw Error(std::string("ZERO_BF16_COMPUTE=") + env + ": expected auto, native or fp32", "ZERO_BF16_COMPUTE");
    }
    choice.asked = *named;
    choice.asked_by = "ZERO_BF16_COMPUTE";
  }
  choice.bf16_in_fp32 = choice.asked == Bf16Compute::kFp32 || (choice.asked == Bf16Compute::kAuto && !every_cpu_native);
  return choice;
}

std::vector<std::string> describe_compute(const ComputeChoice& choice, const CpuFeatures& cpu, bool every_cpu_native,
                                          bool model_is_bf16) {
  const std::string flags = describe(cpu).empty() ? "no AVX2" : describe(cpu);
  const std::string instructions = cpu.amx_bf16 ? "AMX-BF16" : cpu.avx512_bf16 ? "AVX512-BF16" : "";
  const std::string forced =
      choice.asked_by.empty() ? "" : std::string(" (\"") + to_string(choice.asked) + "\" from " + choice.asked_by + ")";
  std::vector<std::string> lines;
  if (!choice.bf16_in_fp32) {
    lines.push_back("CPU " + flags + ": bf16 matrix work runs in bf16" +
                    (instructions.empty() ? "" : " (" + instructions + ")") + forced +
                    "; fp16 computes in fp32 (LibTorch has no CPU fp16 kernels)");
    if (model_is_bf16 && !every_cpu_native) {
      lines.push_back(std::string("warning: ") + (cpu.native_bf16() ? "a rank's CPU" : "this CPU") +
                      " has no AVX512-BF16 or AMX-BF16: LibTorch's bf16 matmul runs a scalar fallback there, ~20x "
                      "slower than fp32; ZERO_BF16_COMPUTE=fp32 computes in fp32 instead");
    }
    return lines;
  }
  const std::string why = every_cpu_native ? ""
                          : std::string(" (") + (cpu.native_bf16() ? "a rank's CPU has no" : "no") +
                                " AVX512-BF16 or AMX-BF16: LibTorch's bf16 matmul would run ~20x slower than fp32)";
  lines.push_back("CPU " + flags + ": bf16 matrix work runs in fp32 on widened copies of the bf16 weights" + forced +
                  why + "; parameters, gradients and communication stay bf16 (ZERO_BF16_COMPUTE=native forces bf16 kernels)");
  return lines;
}

}  // namespace zero::engine
