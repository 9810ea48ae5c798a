// JSON written by someone else (a model directory, a tokenizer, instruction data, a checkpoint):
// parsed with a nesting limit. nlohmann's parser is iterative, but dump(), comparisons and the
// readers' own walks recurse once per level, so a few kilobytes of brackets would overflow the
// stack later; here they are an error naming the file at once.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "zero/error.h"

namespace zero {

// Deeper than any real file of these formats (a tokenizer.json is about 6 levels deep).
inline constexpr int kMaxJsonDepth = 128;

// Json: nlohmann::json or nlohmann::ordered_json; Input: what Json::parse takes (a string, an
// istream, a pair of iterators passed as two arguments to the overload below). Parse errors are
// nlohmann's, as from Json::parse; too deep is a zero::Error naming `origin`.
template <class Json = nlohmann::json, class Input>
Json parse_json_from(Input&& input, const std::string& origin, bool allow_exceptions = true) {
  return Json::parse(
      std::forward<Input>(input),
      [&origin](int depth, typename Json::parse_event_t, Json&) {
        if (depth > kMaxJsonDepth) {
          throw Error(origin + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels", origin);
        }
        return true;
      },
      allow_exceptions);
}

template <class Json = nlohmann::json, class Iterator>
Json parse_json_from(Iterator first, Iterator last, const std::string& origin) {
  return Json::parse(first, last, [&origin](int depth, typename Json::parse_event_t, Json&) {
    if (depth > kMaxJsonDepth) {
      throw Error(origin + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels", origin);
    }
    return true;
  });
}

// A field of an object in such a file, read as T: `fallback` when it is absent or null, else an
// Error naming `path`.`key` and what it holds when it is of another type (nlohmann's own message,
// "type must be string, but is boolean", names neither the file nor the key).
template <class T, class Json>
T json_field(const Json& object, const std::string& key, T fallback, const std::string& path) {
  if (!object.is_object()) throw Error(path + ": must be an object, not " + object.type_name(), path);
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  try {
    return it->template get<T>();
  } catch (const typename Json::exception&) {
    const std::string held = it->is_primitive() ? it->dump().substr(0, 80) : std::string("a ") + it->type_name();
    throw Error(path + "." + key + ": has the wrong type (" + held + ")", path + "." + key);
  }
}

// The same for a field that must be there.
template <class T, class Json>
T json_required(const Json& object, const std::string& key, const std::string& path) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null())
    throw Error(path + "." + key + ": is required", path + "." + key);
  return json_field<T>(object, key, T{}, path);
}

}  // namespace zero
