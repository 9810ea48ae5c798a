// Parses DeepSpeed's hjson-flavoured JSON: // and /* */ comments, trailing commas; duplicate keys
// are an error (nlohmann would silently keep the last one).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace zero::config_detail {

// Throws ConfigError(origin, {"line L, column C: ..."}) on a syntax error or a duplicate key.
nlohmann::json parse_relaxed_json(std::string_view text, const std::string& origin);

// Blanks out commas that directly precede '}' or ']' (outside strings and comments), keeping
// every other byte in place so that error positions still point into the user's file.
std::string blank_trailing_commas(std::string_view text);

}  // namespace zero::config_detail
