// Reads a DeepSpeed config the way DeepSpeed does: with an Hjson parser (DeepSpeed calls
// `hjson.load`). Hjson is JSON plus: `#`, `//` and `/* */` comments; commas optional at line
// ends and allowed before `}`/`]`; quoteless keys; quoteless values that run to the end of the
// line (a number, true, false or null when the whole of them is one, else a string);
// single-quoted and ''' multiline strings; braces optional around the root object.
//
// Differences from the Hjson reference parsers, each on purpose: a duplicate key is an error
// (DeepSpeed reads with a hook that raises on duplicates; Hjson itself keeps the last); the file
// must be UTF-8 (Python's text read refuses anything else) without NUL bytes; nesting deeper
// than 256 is an error. Whole numbers become integers, the rest doubles.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace zero::config_detail {

// Throws ConfigError(origin, {"line L, column C: ..."}) on a syntax error, or
// ConfigError(origin, {"key.path: duplicate key (line L)"}).
nlohmann::json parse_hjson(std::string_view text, const std::string& origin);

}  // namespace zero::config_detail
