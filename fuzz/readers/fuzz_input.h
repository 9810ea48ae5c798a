// What the reader fuzzers share. Each reader takes a path, as users give them, so the input is
// written to a file in a directory of the fuzzer's own (removed at exit). The rule they check: a
// reader may end with zero::Error (a clear error naming the file); any other exception escaping
// it (a JSON library's "type must be string", std::stod's "stod", bad_alloc) is a finding, as is
// a crash, undefined behaviour, a leak past libFuzzer's -rss_limit_mb or a hang past -timeout.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <typeinfo>

#include "zero/error.h"

namespace fuzz {

// The fuzzer's own directory, removed at exit. (Held by a pointer that is never freed: an atexit
// handler registered while a static is built runs after that static is destroyed.)
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path* dir = [] {
    auto* d = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                        ("zero_fuzz." + std::to_string(::getpid())));
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch(), ec);
    });
    return d;
  }();
  return *dir;
}

// Writes `bytes` to scratch()/name (directories created) and returns the path.
inline std::string write_file(const std::string& name, std::string_view bytes) {
  const std::filesystem::path path = scratch() / name;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `read`; zero::Error is an answer, anything else escaping is a finding.
template <class Read>
void only_clear_errors(const char* reader, Read&& read) {
  try {
    read();
  } catch (const zero::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "finding: %s let a %s escape: %s\n", reader, typeid(e).name(), e.what());
    std::abort();
  }
}

}  // namespace fuzz
