#include "config/relaxed_json.h"

#include <set>
#include <vector>

#include "zero/error.h"

namespace zero::config_detail {
namespace {

// Skips a comment starting at text[i] (which is '/'); returns the index after it, or i if none.
size_t skip_comment(std::string_view text, size_t i) {
  if (i + 1 >= text.size()) return i;
  if (text[i + 1] == '/') {
    size_t end = text.find('\n', i);
    return end == std::string_view::npos ? text.size() : end;
  }
  if (text[i + 1] == '*') {
    size_t end = text.find("*/", i + 2);
    return end == std::string_view::npos ? text.size() : end + 2;
  }
  return i;
}

std::string line_and_column(std::string_view text, size_t byte) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

}  // namespace

std::string blank_trailing_commas(std::string_view text) {
  std::string out(text);
  size_t pending_comma = std::string::npos;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '"') {  // skip a string, honouring escapes
      pending_comma = std::string::npos;
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
      }
      continue;
    }
    if (c == '/') {
      size_t after = skip_comment(text, i);
      if (after != i) {
        i = after - 1;
        continue;
      }
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
    if ((c == '}' || c == ']') && pending_comma != std::string::npos) out[pending_comma] = ' ';
    pending_comma = c == ',' ? i : std::string::npos;
  }
  return out;
}

nlohmann::json parse_relaxed_json(std::string_view text, const std::string& origin) {
  std::string cleaned = blank_trailing_commas(text);
  // One set of seen keys per open object (arrays push an empty frame so depths line up).
  std::vector<std::set<std::string>> seen;
  std::vector<std::string> path;  // key of each open object, for the message
  std::string duplicate;
  auto key_path = [&] {  // of the value being parsed: "zero_optimization.stage"
    std::string where;
    for (const auto& key : path) {
      if (!key.empty()) where += (where.empty() ? "" : ".") + key;
    }
    return where;
  };
  auto on_event = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        seen.emplace_back();
        path.emplace_back();
        break;
      case E::object_end:
      case E::array_end:
        if (!seen.empty()) seen.pop_back();
        if (!path.empty()) path.pop_back();
        break;
      case E::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!path.empty()) path.back() = key;
        if (!seen.empty() && !seen.back().insert(key).second && duplicate.empty()) duplicate = key_path();
        break;
      }
      default:
        break;
    }
    return true;
  };
  nlohmann::json result;
  try {
    result = nlohmann::json::parse(cleaned, on_event, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    // nlohmann's text reads "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
    auto colon = what.find("parse error");
    std::string detail = colon == std::string::npos ? what : what.substr(colon);
    throw ConfigError(origin, {"invalid JSON at " + line_and_column(cleaned, e.byte ? e.byte - 1 : 0) + ": " + detail});
  } catch (const nlohmann::json::out_of_range& e) {
    // A number beyond double's range ("number overflow parsing '3e400'"): no byte offset is given,
    // the key being parsed names the place.
    std::string what = e.what();
    auto start = what.find("number overflow");
    throw ConfigError(origin, {key_path() + ": " + (start == std::string::npos ? what : what.substr(start))});
  }
  if (!duplicate.empty()) throw ConfigError(origin, {duplicate + ": duplicate key"});
  return result;
}

}  // namespace zero::config_detail
