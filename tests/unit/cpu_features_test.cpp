// CPUID as zero reads it, against the flags the kernel reports in /proc/cpuinfo (an independent
// reading: the kernel also clears what the OS does not save). Holds on any x86-64 machine.
#include "util/cpu_features.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <sstream>

namespace {

std::set<std::string> kernel_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    return {std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
  }
  return {};
}

}  // namespace

TEST(CpuFeatures, AgreeWithTheKernel) {
  const std::set<std::string> flags = kernel_flags();
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo";
  const zero::CpuFeatures f = zero::cpu_features();
  EXPECT_EQ(f.avx2, flags.contains("avx2"));
  EXPECT_EQ(f.avx512f, flags.contains("avx512f"));
  EXPECT_EQ(f.avx512_bf16, flags.contains("avx512_bf16"));
  EXPECT_EQ(f.avx512_fp16, flags.contains("avx512_fp16"));
  EXPECT_EQ(f.amx_bf16, flags.contains("amx_bf16"));
  EXPECT_EQ(f.native_bf16(), flags.contains("avx512_bf16") || flags.contains("amx_bf16"));
  std::cout << "this CPU: " << zero::describe(f) << "\n";
}
