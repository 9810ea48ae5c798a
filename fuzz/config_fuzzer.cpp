// libFuzzer target: any input either parses (and resolves, or fails to) or throws ConfigError.
// Anything else — another exception, a crash, undefined behaviour — is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "zero/config.h"
#include "zero/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    zero::Config config = zero::Config::parse(text, "fuzz.json");
    for (int world : {1, 3}) {
      try {
        config.resolve({.world_size = world, .hidden_size = 64, .micro_batch_size = 2, .allow_unresolved = world == 3});
      } catch (const zero::ConfigError&) {
      }
    }
  } catch (const zero::ConfigError&) {
  }
  return 0;
}
