// ObjectReader — strict, path-aware reading of one JSON object of a DeepSpeed config.
//
// Every getter marks its key as known and records the effective value (with its source) for
// `zero-config check`; finish() then reports every key nobody asked for as unknown, with a
// "did you mean". Problems are collected in Diagnostics rather than thrown, so one pass reports
// all of them; a getter that finds a bad value records the problem and returns the default.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "zero/config.h"

namespace zero::config_detail {

struct Diagnostics {
  std::vector<std::string> problems;
  std::vector<std::string> warnings;
  std::vector<ConfigValue> values;
  std::vector<std::string> autos;  // paths written as "auto"

  void problem(const std::string& path, const std::string& message) { problems.push_back(path + ": " + message); }
  void record(const std::string& path, const nlohmann::json& value, ValueSource source);
};

// The closest of `candidates` to `word` if it is close enough to be a likely typo, else "".
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

class ObjectReader {
 public:
  // `object` may be null (block absent): every getter then returns its default.
  ObjectReader(const nlohmann::json* object, std::string path, Diagnostics& diagnostics);

  bool present() const { return object_ != nullptr; }
  bool has(std::string_view key) const;
  const std::string& path() const { return path_; }
  std::string path_of(std::string_view key) const;

  bool get_bool(std::string_view key, bool fallback);
  // Integers accept 5e8-style numbers that are whole. `min` is inclusive.
  int64_t get_int(std::string_view key, int64_t fallback, int64_t min = INT64_MIN, int64_t max = INT64_MAX);
  double get_double(std::string_view key, double fallback, double min = -1e308, double max = 1e308);
  std::string get_string(std::string_view key, const std::string& fallback);
  // One of `choices`, compared case-insensitively; returns the index into choices.
  size_t get_choice(std::string_view key, size_t fallback, const std::vector<std::string>& choices);
  // As get_int / get_double, but "auto" is accepted: *is_auto is set and the fallback returned.
  int64_t get_int_or_auto(std::string_view key, int64_t fallback, int64_t min, bool* is_auto);
  double get_double_or_auto(std::string_view key, double fallback, double min, double max, bool* is_auto);
  bool get_bool_or_auto(std::string_view key, bool fallback, bool* is_auto);
  std::vector<std::string> get_string_list(std::string_view key);

  // A nested block: null reader when absent, a problem when present but not an object.
  ObjectReader child(std::string_view key);
  // The raw value of a key (marked known), or nullptr.
  const nlohmann::json* raw(std::string_view key);
  // A DeepSpeed key zerocpp does not implement: accepted at DeepSpeed's default, a problem otherwise.
  void require_default(std::string_view key, const nlohmann::json& deepspeed_default);
  // Marks keys as known without reading them (accepted and ignored on purpose by the caller).
  void accept(std::initializer_list<std::string_view> keys);

  // Reports keys that no getter asked for. Call once, after every getter.
  void finish();

 private:
  const nlohmann::json* lookup(std::string_view key);
  // True (and recorded as "auto") when `key` holds the string "auto".
  bool take_auto(std::string_view key, bool* is_auto);
  void record_default(std::string_view key, const nlohmann::json& value);

  const nlohmann::json* object_;
  std::string path_;
  Diagnostics& diag_;
  std::set<std::string, std::less<>> known_;
};

}  // namespace zero::config_detail
