// JavaScript's string and number operations on UTF-8 text: the reference renderer
// (@huggingface/jinja) runs on JavaScript strings, so its `length`, `trim`, `upper` and number
// printing are JavaScript's, and so are the chat-template interpreter's.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace zero::text::jinja {

// Bytes of the JavaScript whitespace character (\s: ASCII spaces, NBSP, U+2000-200A, line and
// paragraph separators, U+3000, BOM, ...) at s[i], or 0.
size_t js_space_at(std::string_view s, size_t i);
std::string js_trim(std::string_view s, bool start = true, bool end = true);

std::u32string code_points(std::string_view utf8);  // utf8 must be valid
std::string utf8(std::u32string_view cps);
size_t utf16_length(std::string_view utf8);
// The UTF-16 code unit at `index` (negative counts from the end) as UTF-8; a lone surrogate half
// becomes U+FFFD, as Node writes it. Empty when out of range.
std::string utf16_unit_at(std::string_view utf8, long index, bool& found);

std::string js_upper(std::string_view s);  // Unicode simple case mapping (see docs/chat_templates.md)
std::string js_lower(std::string_view s);
std::string js_title(std::string_view s);  // /\b\w/ upper-cased: ASCII only, the rest unchanged

std::string js_number(double v);        // Number.prototype.toString
double js_to_number(std::string_view s);  // Number(string): NaN when not a number
bool js_parse_int(std::string_view s, double& out);    // parseInt(s, 10); false for NaN
bool js_parse_float(std::string_view s, double& out);  // parseFloat(s); false for NaN
std::string json_quote(std::string_view s);  // JSON.stringify of a string

}  // namespace zero::text::jinja
