// ObjectReader — strict, path-aware reading of one JSON object of a DeepSpeed config.
//
// Every getter marks its key as known and records the effective value (with its source) for
// `zero-config check`; finish() then deals with every key nobody asked for as DeepSpeed does
// with that block (UnknownKeys). Problems are collected in Diagnostics rather than thrown, so
// one pass reports all of them; a getter that finds a bad value records the problem and returns
// the default. A plain getter that finds "auto" returns the default with a warning (DeepSpeed's
// pydantic blocks drop "auto" the same way); the *_or_auto getters leave it to a resolution rule.
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
  bool strict = false;  // every unknown key and every unresolvable "auto" is a problem
  std::vector<std::string> problems;
  std::vector<std::string> warnings;
  std::vector<ConfigValue> values;
  std::vector<std::string> autos;  // paths written as "auto"

  void problem(const std::string& path, const std::string& message) { problems.push_back(path + ": " + message); }
  void record(const std::string& path, const nlohmann::json& value, ValueSource source);
};

// The closest of `candidates` to `word` if it is close enough to be a likely typo, else "".
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);
// A candidate `word` is surely a misspelling of: within edit distance 2 (ignoring case), or
// holding every word of it ("warmup_steps" → "warmup_num_steps"); else "".
std::string near_miss(std::string_view word, const std::vector<std::string>& candidates);

// What DeepSpeed does with a key it does not know in a block.
enum class UnknownKeys {
  kRefuse,  // its pydantic blocks (zero_optimization, the monitors, ...): an error
  kIgnore,  // blocks it reads key by key (top level, fp16, optimizer, ...): ignored. zerocpp
            // warns, refuses a near miss of a known key, and is silent on keys starting "_"
};

class ObjectReader {
 public:
  // `object` may be null (block absent): every getter then returns its default.
  ObjectReader(const nlohmann::json* object, std::string path, Diagnostics& diagnostics,
               UnknownKeys unknown = UnknownKeys::kRefuse);
  void set_unknown_keys(UnknownKeys unknown) { unknown_ = unknown; }

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
  ObjectReader child(std::string_view key, UnknownKeys unknown = UnknownKeys::kRefuse);
  // The one of `name` and `alias` (DeepSpeed accepts both spellings of a field) the block uses,
  // the alias when neither is given; both given is a problem, as in DeepSpeed. Marks both known.
  std::string_view spelling(std::string_view name, std::string_view alias);
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
  // When `value` is "auto" (and no rule resolves it): records DeepSpeed's default `fallback`
  // with a warning (a problem under strict) and returns true.
  bool auto_to_default(std::string_view key, const nlohmann::json* value, const nlohmann::json& fallback);
  void record_default(std::string_view key, const nlohmann::json& value);

  const nlohmann::json* object_;
  std::string path_;
  Diagnostics& diag_;
  UnknownKeys unknown_;
  std::set<std::string, std::less<>> known_;
};

}  // namespace zero::config_detail
