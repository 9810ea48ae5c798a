// JSON written by someone else (a model directory, a tokenizer, instruction data, a checkpoint):
// parsed with a nesting limit. nlohmann's parser is iterative, but dump(), comparisons and the
// readers' own walks recurse once per level, so a few kilobytes of brackets would overflow the
// stack later; here they are an error naming the file at once.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "zero/error.h"

namespace zero {

// Deeper than any real file of these formats (a tokenizer.json is about 6 levels deep).
inline constexpr int kMaxJsonDepth = 128;

namespace json_detail {

template <class Json>
auto depth_limit(const std::string& origin) {
  return [&origin](int depth, typename Json::parse_event_t, Json&) {
    if (depth > kMaxJsonDepth) {
      throw Error(origin + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels", origin);
    }
    return true;
  };
}

// nlohmann's parser throws out_of_range (406), not parse_error, for a number beyond a double
// (1e999): a reader catching parse_error let it escape (found by the instruction-data fuzzer).
template <class Json, class Parse>
Json parse_numbers_in_range(Parse&& parse, const std::string& origin) {
  try {
    return parse();
  } catch (const typename Json::out_of_range& e) {
    throw Error(origin + ": a number out of range: " + e.what(), origin);
  }
}

}  // namespace json_detail

// Json: nlohmann::json or nlohmann::ordered_json; Input: what Json::parse takes (a string, an
// istream, a pair of iterators passed as two arguments to the overload below). Parse errors are
// nlohmann's, as from Json::parse; too deep, and a number beyond a double, are zero::Errors naming
// `origin`.
template <class Json = nlohmann::json, class Input>
Json parse_json_from(Input&& input, const std::string& origin, bool allow_exceptions = true) {
  return json_detail::parse_numbers_in_range<Json>(
      [&] {
        return Json::parse(std::forward<Input>(input), json_detail::depth_limit<Json>(origin), allow_exceptions);
      },
      origin);
}

template <class Json = nlohmann::json, class Iterator>
Json parse_json_from(Iterator first, Iterator last, const std::string& origin) {
  return json_detail::parse_numbers_in_range<Json>(
      [&] { return Json::parse(first, last, json_detail::depth_limit<Json>(origin)); }, origin);
}

// `value` as T, where it is one: false when it is of another type, and for an integer type when
// it is out of T's range or a number with a fraction. (nlohmann's get<int64_t>() of 2.2e21
// converts a double out of range: undefined behaviour, found by the config.json fuzzer.)
template <class T, class Json>
bool json_to(const Json& value, T& out) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using Limits = std::numeric_limits<T>;
    if (value.is_number_unsigned()) {
      const auto u = value.template get<uint64_t>();
      if (u > static_cast<uint64_t>(Limits::max())) return false;
      out = static_cast<T>(u);
      return true;
    }
    if (value.is_number_integer()) {
      const auto i = value.template get<int64_t>();
      if ((Limits::is_signed && i < static_cast<int64_t>(Limits::min())) || (!Limits::is_signed && i < 0) ||
          (i > 0 && static_cast<uint64_t>(i) > static_cast<uint64_t>(Limits::max())))
        return false;
      out = static_cast<T>(i);
      return true;
    }
    if (value.is_number_float()) {  // 8192.0: as transformers writes some; 1.5 or 2.2e21: not
      const double d = value.template get<double>(), bound = std::ldexp(1.0, Limits::digits);
      if (!(d == std::trunc(d) && d < bound && d >= (Limits::is_signed ? -bound : 0.0))) return false;
      out = static_cast<T>(d);
      return true;
    }
    return false;
  } else if constexpr (requires { typename T::value_type; } && !std::is_same_v<T, std::string>) {
    if (!value.is_array()) return false;
    T items;
    for (const auto& item : value) {
      typename T::value_type converted{};
      if (!json_to(item, converted)) return false;
      items.push_back(std::move(converted));
    }
    out = std::move(items);
    return true;
  } else {
    try {
      out = value.template get<T>();
      return true;
    } catch (const typename Json::exception&) {
      return false;
    }
  }
}

// `path`.`key`, or `path` + `key` where `path` ends with a space ("config.json: " + "dtype").
inline std::string json_key(const std::string& path, const std::string& key) {
  return path.empty() || path.back() == ' ' ? path + key : path + "." + key;
}

// A field of an object in such a file, read as T: `fallback` when it is absent or null, else an
// Error naming `path`.`key` and what it holds when it is not a T (nlohmann's own message, "type
// must be string, but is boolean", names neither the file nor the key).
template <class T, class Json>
T json_field(const Json& object, const std::string& key, T fallback, const std::string& path) {
  if (!object.is_object()) throw Error(path + ": must be an object, not " + object.type_name(), path);
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  T out{};
  if (!json_to(*it, out)) {
    const std::string held = it->is_primitive() ? it->dump().substr(0, 80) : std::string("a ") + it->type_name();
    throw Error(json_key(path, key) + ": has the wrong type (" + held + ")", json_key(path, key));
  }
  return out;
}

// The same for a field that must be there.
template <class T, class Json>
T json_required(const Json& object, const std::string& key, const std::string& path) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null())
    throw Error(json_key(path, key) + ": is required", json_key(path, key));
  return json_field<T>(object, key, T{}, path);
}

}  // namespace zero
