#include "util/cpu_features.h"

#include <cpuid.h>

#include <cstdint>

namespace zero {
namespace {

// XCR0, the register states the OS saves on a context switch (0 when XGETBV is not enabled).
uint64_t os_saved_states() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_OSXSAVE)) return 0;
  uint32_t low = 0, high = 0;
  __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (static_cast<uint64_t>(high) << 32) | low;
}

}  // namespace

CpuFeatures cpu_features() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  const unsigned leaf7_ebx = ebx, leaf7_edx = edx, max_subleaf = eax;
  unsigned leaf7_1_eax = 0;
  if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) leaf7_1_eax = eax;

  const uint64_t xcr0 = os_saved_states();
  const bool ymm = (xcr0 & 0x6) == 0x6;            // SSE and AVX state
  const bool zmm = ymm && (xcr0 & 0xe0) == 0xe0;   // opmask, upper ZMM halves, ZMM16-31
  const bool tiles = (xcr0 & 0x60000) == 0x60000;  // AMX tile config and data
  f.avx2 = ymm && (leaf7_ebx & bit_AVX2);
  f.avx512f = zmm && (leaf7_ebx & bit_AVX512F);
  f.avx512_bf16 = f.avx512f && (leaf7_1_eax & bit_AVX512BF16);
  f.avx512_fp16 = f.avx512f && (leaf7_edx & bit_AVX512FP16);
  f.amx_bf16 = tiles && (leaf7_edx & bit_AMX_BF16);
  return f;
}

std::string describe(const CpuFeatures& f) {
  std::string out;
  auto add = [&](bool on, const char* name) {
    if (on) out += (out.empty() ? "" : " ") + std::string(name);
  };
  add(f.avx2, "avx2");
  add(f.avx512f, "avx512f");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_fp16, "avx512_fp16");
  add(f.amx_bf16, "amx_bf16");
  return out.empty() ? "none of avx2, avx512f, avx512_bf16, avx512_fp16, amx_bf16" : out;
}

}  // namespace zero
