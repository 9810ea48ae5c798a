// libFuzzer target, differential: every input is read by zerocpp's Hjson reader and by hjson-go
// (`hjson-cli`, run on a temporary file). They must agree, or differ only where zerocpp differs
// on purpose (tests/hjson/hjson_oracle.cpp); anything else aborts with both readings.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "hjson_oracle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/zerocpp_hjson_fuzz_" + std::to_string(getpid()) + ".hjson";
  std::string text(reinterpret_cast<const char*>(data), size);
  FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) std::abort();
  std::fwrite(text.data(), 1, text.size(), file);
  std::fclose(file);
  auto result = zero::hjson_oracle::compare_with_hjson_go(text, path);
  if (result.verdict == zero::hjson_oracle::Verdict::kMismatch) {
    std::fprintf(stderr, "hjson mismatch: %s\n", result.detail.c_str());
    std::abort();
  }
  return 0;
}
