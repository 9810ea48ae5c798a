// What this CPU does natively, read from CPUID (GCC's <cpuid.h>), with the OS's consent (XGETBV:
// the kernel saves the registers). LibTorch 1.13 runs bf16 matrix work fast only with AVX512-BF16
// or AMX-BF16; without them its bf16 matmul is a scalar fallback ~30x slower than fp32 (issue 29).
// Torch-free, so the unit tests check it against the kernel's /proc/cpuinfo.
#pragma once

#include <string>

namespace zero {

struct CpuFeatures {
  bool avx2 = false;
  bool avx512f = false;
  bool avx512_bf16 = false;  // VDPBF16PS and friends (Cooper Lake, Zen 4, Sapphire Rapids)
  bool amx_bf16 = false;     // AMX tiles with bf16 (Sapphire Rapids)
  bool avx512_fp16 = false;  // fp16 arithmetic (Sapphire Rapids); LibTorch 1.13 has no CPU fp16 matmul

  // bf16 matrix work has instructions of its own.
  bool native_bf16() const { return avx512_bf16 || amx_bf16; }
};

CpuFeatures cpu_features();

// The set flags, as /proc/cpuinfo names them: "avx2 avx512f avx512_bf16".
std::string describe(const CpuFeatures& features);

}  // namespace zero
