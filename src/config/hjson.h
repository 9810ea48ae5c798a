// Reads a DeepSpeed config the way DeepSpeed does: with an Hjson parser (DeepSpeed calls
// `hjson.load`). Hjson is JSON plus: `#`, `//` and `/* */` comments; commas optional at line
// ends and allowed before `}`/`]`; quoteless keys; quoteless values that run to the end of the
// line (a number, true, false or null when the whole of them is one, else a string);
// single-quoted and ''' multiline strings; braces optional around the root object.
//
// It follows hjson-go (the reference implementation, the tests' oracle) except, on purpose: a
// duplicate key is an error (DeepSpeed reads with a hook that raises on duplicates; Hjson keeps
// the last); the file must be UTF-8 (Python's text read refuses anything else) and hold no NUL
// byte (hjson-go stops reading at one); a \u surrogate pair is joined (hjson-go writes two
// U+FFFD); nesting deeper than 256 is an error; a byte-order mark is skipped. Whole numbers
// become integers, the rest doubles.
//
// Where Python's hjson (what DeepSpeed runs) differs from hjson-go, zerocpp reads as hjson-go:
// "2." and "1.e5" are numbers (Python: strings), control characters other than tab, CR and LF
// count as whitespace, a raw tab may sit inside a quoted string (Python refuses it), an unclosed
// /* comment runs to the end of the file (Python fails), a lone CR ends a line only where a value
// without quotes is read (Python's text mode turns every CR into a line end), and whole floats
// stay doubles (Python makes those below 1e10 integers: the same value for every key zerocpp
// reads).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace zero::config_detail {

// Throws ConfigError(origin, {"invalid Hjson/JSON at line L, column C: <what> (in key.path)"}) on
// a syntax error or a duplicate key.
nlohmann::json parse_hjson(std::string_view text, const std::string& origin);

}  // namespace zero::config_detail
