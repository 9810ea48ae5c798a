#include "config/object_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

namespace zero::config_detail {
namespace {

using nlohmann::json;

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      size_t substitute = diagonal + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string number(double d) {
  std::ostringstream out;
  out << d;
  return out.str();
}

std::string describe(const json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(value.type_name()) + " " + text;
}

// The words of a snake_case key, lowercased.
std::vector<std::string> tokens(std::string_view key) {
  std::vector<std::string> out;
  std::string current;
  for (char c : key) {
    if (c == '_') {
      if (!current.empty()) out.push_back(current);
      current.clear();
    } else {
      current += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  if (!current.empty()) out.push_back(current);
  return out;
}

// The shortest candidate holding every word (two or more) of `word`, or "".
std::string holding_every_word(std::string_view word, const std::vector<std::string>& candidates) {
  std::vector<std::string> words = tokens(word);
  std::string best;
  if (words.size() < 2) return best;
  for (const auto& c : candidates) {
    std::vector<std::string> have = tokens(c);
    bool all = std::all_of(words.begin(), words.end(), [&](const std::string& w) {
      return std::find(have.begin(), have.end(), w) != have.end();
    });
    if (all && (best.empty() || c.size() < best.size())) best = c;
  }
  return best;
}

// The candidate fewest edits from `word` (the first of equals), and that distance.
std::pair<std::string, size_t> nearest_spelling(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return {best, best_distance};
}

bool is_auto_string(const json& value) { return value.is_string() && value.get_ref<const std::string&>() == "auto"; }

}  // namespace

void Diagnostics::record(const std::string& path, const json& value, ValueSource source) {
  for (auto& v : values) {
    if (v.path == path) {
      v.value = value.dump();
      v.source = source;
      return;
    }
  }
  values.push_back({path, value.dump(), source});
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  // A key that holds every word of the typo ("warmup_steps" → "warmup_num_steps") beats spelling.
  if (std::string holder = holding_every_word(word, candidates); !holder.empty()) return holder;
  auto [best, best_distance] = nearest_spelling(word, candidates);
  size_t limit = std::max<size_t>(2, word.size() / 3);
  bool prefix =
      !best.empty() && (lowercase(best).find(lowercase(word)) == 0 || lowercase(word).find(lowercase(best)) == 0);
  return (best_distance <= limit || (prefix && word.size() >= 4)) ? best : std::string();
}

std::string near_miss(std::string_view word, const std::vector<std::string>& candidates) {
  // Two edits make most short keys into some other short key (fp32 → fp16, seq → seed): one, there.
  auto [best, distance] = nearest_spelling(word, candidates);
  if (!best.empty() && distance <= (word.size() < 6 ? 1u : 2u)) return best;
  return holding_every_word(word, candidates);
}

ObjectReader::ObjectReader(const json* object, std::string path, Diagnostics& diagnostics, UnknownKeys unknown)
    : object_(object), path_(std::move(path)), diag_(diagnostics), unknown_(unknown) {}

bool ObjectReader::auto_to_default(std::string_view key, const json* value, const json& fallback) {
  if (!value || !is_auto_string(*value)) return false;
  if (diag_.strict) {
    diag_.problem(path_of(key), "\"auto\" has no resolution rule here (strict mode: give a value)");
  } else {
    diag_.warnings.push_back(path_of(key) + ": \"auto\" with no rule to resolve it: DeepSpeed's default " +
                             (fallback.is_null() ? std::string("(absent)") : fallback.dump()) + " applies");
  }
  diag_.record(path_of(key), fallback, ValueSource::kAutoDefault);
  return true;
}

std::string_view ObjectReader::spelling(std::string_view name, std::string_view alias) {
  known_.insert(std::string(name));
  known_.insert(std::string(alias));
  bool has_name = has(name), has_alias = has(alias);
  if (has_name && has_alias) {
    diag_.problem(path_of(alias), "given twice, also as " + std::string(name) +
                                      " (DeepSpeed refuses both spellings of one field): keep one");
  }
  return has_name && !has_alias ? name : alias;
}

std::string ObjectReader::path_of(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

bool ObjectReader::has(std::string_view key) const {
  return object_ && object_->find(std::string(key)) != object_->end();
}

const json* ObjectReader::lookup(std::string_view key) {
  known_.insert(std::string(key));
  if (!object_) return nullptr;
  auto it = object_->find(std::string(key));
  return it == object_->end() ? nullptr : &*it;
}

const json* ObjectReader::raw(std::string_view key) { return lookup(key); }

void ObjectReader::accept(std::initializer_list<std::string_view> keys) {
  for (auto k : keys) known_.insert(std::string(k));
}

void ObjectReader::require_default(std::string_view key, const json& deepspeed_default) {
  const json* v = lookup(key);
  if (v && *v != deepspeed_default) {
    diag_.problem(path_of(key),
                  "not supported by zerocpp (only DeepSpeed's default " + deepspeed_default.dump() + " is accepted)");
  }
}

void ObjectReader::record_default(std::string_view key, const json& value) {
  diag_.record(path_of(key), value, ValueSource::kDefault);
}

bool ObjectReader::get_bool(std::string_view key, bool fallback) {
  const json* v = lookup(key);
  if (!v) {
    record_default(key, fallback);
    return fallback;
  }
  if (auto_to_default(key, v, fallback)) return fallback;
  if (!v->is_boolean()) {
    diag_.problem(path_of(key), "expected true or false, got " + describe(*v));
    return fallback;
  }
  diag_.record(path_of(key), *v, ValueSource::kFile);
  return v->get<bool>();
}

int64_t ObjectReader::get_int(std::string_view key, int64_t fallback, int64_t min, int64_t max) {
  const json* v = lookup(key);
  if (!v) {
    record_default(key, fallback);
    return fallback;
  }
  if (auto_to_default(key, v, fallback)) return fallback;
  std::string range = min == INT64_MIN   ? "an integer"
                      : max == INT64_MAX ? "an integer >= " + std::to_string(min)
                                         : "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  int64_t result;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      diag_.problem(path_of(key), "expected " + range + ", got " + describe(*v));
      return fallback;
    }
    result = v->get<int64_t>();
  } else if (v->is_number_float()) {
    double d = v->get<double>();
    // Note: 9.2e18 is the largest double that still converts into int64 without overflow.
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.2e18) {
      diag_.problem(path_of(key), "expected " + range + ", got " + describe(*v));
      return fallback;
    }
    result = static_cast<int64_t>(d);
  } else {
    diag_.problem(path_of(key), "expected " + range + ", got " + describe(*v));
    return fallback;
  }
  if (result < min || result > max) {
    diag_.problem(path_of(key), "expected " + range + ", got " + std::to_string(result));
    return fallback;
  }
  diag_.record(path_of(key), result, ValueSource::kFile);
  return result;
}

double ObjectReader::get_double(std::string_view key, double fallback, double min, double max) {
  const json* v = lookup(key);
  if (!v) {
    record_default(key, fallback);
    return fallback;
  }
  if (auto_to_default(key, v, fallback)) return fallback;
  if (!v->is_number()) {
    diag_.problem(path_of(key), "expected a number, got " + describe(*v));
    return fallback;
  }
  double d = v->get<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    std::string bound = max >= 1e308 ? ">= " + number(min) : "in [" + number(min) + ", " + number(max) + "]";
    diag_.problem(path_of(key), "expected a number " + bound + ", got " + v->dump());
    return fallback;
  }
  diag_.record(path_of(key), *v, ValueSource::kFile);
  return d;
}

std::string ObjectReader::get_string(std::string_view key, const std::string& fallback) {
  const json* v = lookup(key);
  if (!v || v->is_null()) {
    record_default(key, fallback);
    return fallback;
  }
  if (auto_to_default(key, v, fallback)) return fallback;
  if (!v->is_string()) {
    diag_.problem(path_of(key), "expected a string, got " + describe(*v));
    return fallback;
  }
  diag_.record(path_of(key), *v, ValueSource::kFile);
  return v->get<std::string>();
}

size_t ObjectReader::get_choice(std::string_view key, size_t fallback, const std::vector<std::string>& choices) {
  const json* v = lookup(key);
  if (!v || v->is_null()) {
    record_default(key, choices[fallback]);
    return fallback;
  }
  if (auto_to_default(key, v, choices[fallback])) return fallback;
  std::string accepted;
  for (const auto& c : choices) accepted += (accepted.empty() ? "" : ", ") + json(c).dump();
  if (v->is_string()) {
    std::string given = lowercase(v->get<std::string>());
    for (size_t i = 0; i < choices.size(); ++i) {
      if (lowercase(choices[i]) == given) {
        diag_.record(path_of(key), *v, ValueSource::kFile);
        return i;
      }
    }
  }
  diag_.problem(path_of(key), "expected one of " + accepted + ", got " + describe(*v));
  return fallback;
}

bool ObjectReader::take_auto(std::string_view key, bool* is_auto) {
  const json* v = lookup(key);
  *is_auto = v && is_auto_string(*v);
  if (*is_auto) {
    diag_.autos.push_back(path_of(key));
    diag_.record(path_of(key), "auto", ValueSource::kAuto);
  }
  return *is_auto;
}

int64_t ObjectReader::get_int_or_auto(std::string_view key, int64_t fallback, int64_t min, bool* is_auto) {
  return take_auto(key, is_auto) ? fallback : get_int(key, fallback, min);
}

double ObjectReader::get_double_or_auto(std::string_view key, double fallback, double min, double max, bool* is_auto) {
  return take_auto(key, is_auto) ? fallback : get_double(key, fallback, min, max);
}

bool ObjectReader::get_bool_or_auto(std::string_view key, bool fallback, bool* is_auto) {
  return take_auto(key, is_auto) ? fallback : get_bool(key, fallback);
}

std::vector<std::string> ObjectReader::get_string_list(std::string_view key) {
  const json* v = lookup(key);
  std::vector<std::string> out;
  if (!v) {
    record_default(key, json::array());
    return out;
  }
  if (auto_to_default(key, v, json::array())) return out;
  if (!v->is_array()) {
    diag_.problem(path_of(key), "expected a list of strings, got " + describe(*v));
    return out;
  }
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      diag_.problem(path_of(key) + "[" + std::to_string(i) + "]", "expected a string, got " + describe((*v)[i]));
      continue;
    }
    out.push_back((*v)[i].get<std::string>());
  }
  diag_.record(path_of(key), *v, ValueSource::kFile);
  return out;
}

ObjectReader ObjectReader::child(std::string_view key, UnknownKeys unknown) {
  const json* v = lookup(key);
  if (v && v->is_null()) {  // DeepSpeed's own config printout writes absent blocks as null
    v = nullptr;
  } else if (auto_to_default(key, v, nullptr)) {
    v = nullptr;
  } else if (v && !v->is_object()) {
    diag_.problem(path_of(key), "expected an object, got " + describe(*v));
    v = nullptr;
  }
  return ObjectReader(v, path_of(key), diag_, unknown);
}

void ObjectReader::finish() {
  if (!object_) return;
  std::vector<std::string> candidates(known_.begin(), known_.end());
  for (auto it = object_->begin(); it != object_->end(); ++it) {
    const std::string& key = it.key();
    if (known_.count(key)) continue;
    if (unknown_ == UnknownKeys::kIgnore && !diag_.strict) {
      if (!key.empty() && key[0] == '_') continue;  // a comment, by the usual convention
      std::string miss = near_miss(key, candidates);
      if (miss.empty()) {
        diag_.warnings.push_back(path_of(key) + ": unknown key, ignored, as DeepSpeed does");
        continue;
      }
      diag_.problem(path_of(key), "unknown key (did you mean \"" + miss + "\"?)");
      continue;
    }
    std::string suggestion = closest_match(key, candidates);
    std::string why = unknown_ == UnknownKeys::kIgnore ? " (DeepSpeed ignores it; strict mode refuses it)" : "";
    diag_.problem(path_of(key), "unknown key" + why +
                                    (suggestion.empty() ? std::string() : " (did you mean \"" + suggestion + "\"?)"));
  }
}

}  // namespace zero::config_detail
