// Helpers for the config tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "zero/config.h"
#include "zero/error.h"

inline std::string example_config(const std::string& name) {
  return std::string(ZERO_SOURCE_DIR) + "/examples/configs/" + name;
}

// The effective value of `path` as recorded for zero-config, or "<missing>".
inline std::string value_of(const zero::Config& c, const std::string& path) {
  for (const auto& v : c.values()) {
    if (v.path == path) return v.value;
  }
  return "<missing>";
}

inline zero::ValueSource source_of(const zero::Config& c, const std::string& path) {
  for (const auto& v : c.values()) {
    if (v.path == path) return v.source;
  }
  ADD_FAILURE() << "no value recorded for " << path;
  return zero::ValueSource::kDefault;
}
