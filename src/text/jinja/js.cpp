// JavaScript string and number semantics for the chat-template interpreter (see jinja/js.h).
#include "text/jinja/js.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <utf8proc.h>

namespace zero::text::jinja {
namespace {

// Decodes the code point at s[i] (s is valid UTF-8); sets `len` to its byte length.
char32_t decode(std::string_view s, size_t i, size_t& len) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  if (b(0) < 0x80) return len = 1, b(0);
  if (b(0) < 0xE0) return len = 2, ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
  if (b(0) < 0xF0) return len = 3, ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return len = 4, ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

bool is_js_space(char32_t c) {
  return c == 0x09 || c == 0x0A || c == 0x0B || c == 0x0C || c == 0x0D || c == 0x20 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 ||
         c == 0xFEFF;
}

template <typename Map>
std::string map_case(std::string_view s, Map map) {
  std::string out;
  for (size_t i = 0, len = 0; i < s.size(); i += len) map(out, decode(s, i, len));
  return out;
}

bool is_js_digit(char c) { return c >= '0' && c <= '9'; }

// The longest prefix of s that is a JavaScript decimal literal (digits, fraction, exponent).
size_t decimal_prefix(std::string_view s) {
  size_t i = 0, digits = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  while (i < s.size() && is_js_digit(s[i])) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    size_t j = i + 1, frac = 0;
    while (j < s.size() && is_js_digit(s[j])) ++j, ++frac;
    if (digits + frac > 0) i = j, digits += frac;
  }
  if (digits == 0) return 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    if (j < s.size() && is_js_digit(s[j])) {
      while (j < s.size() && is_js_digit(s[j])) ++j;
      i = j;
    }
  }
  return i;
}

double parse_decimal(std::string_view s) { return std::strtod(std::string(s).c_str(), nullptr); }

}  // namespace

size_t js_space_at(std::string_view s, size_t i) {
  size_t len = 0;
  return i < s.size() && is_js_space(decode(s, i, len)) ? len : 0;
}

std::string js_trim(std::string_view s, bool start, bool end) {
  size_t b = 0, e = s.size();
  if (start)
    while (size_t n = js_space_at(s, b)) b += n;
  if (end) {
    // Note: scan forward (UTF-8 cannot be decoded backwards here without care); keep the end of
    // the last non-space character.
    size_t last = b;
    for (size_t i = b, len = 0; i < s.size(); i += len) {
      decode(s, i, len);
      if (!js_space_at(s, i)) last = i + len;
    }
    e = last;
  }
  return std::string(s.substr(b, e - b));
}

std::u32string code_points(std::string_view s) {
  std::u32string out;
  for (size_t i = 0, len = 0; i < s.size(); i += len) out += decode(s, i, len);
  return out;
}

std::string utf8(std::u32string_view cps) {
  std::string out;
  for (char32_t c : cps) append_utf8(out, c);
  return out;
}

size_t utf16_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0, len = 0; i < s.size(); i += len) n += decode(s, i, len) >= 0x10000 ? 2 : 1;
  return n;
}

std::string utf16_unit_at(std::string_view s, long index, bool& found) {
  const long n = static_cast<long>(utf16_length(s));
  if (index < 0) index += n;
  found = index >= 0 && index < n;
  if (!found) return {};
  long unit = 0;
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    const char32_t c = decode(s, i, len);
    const long width = c >= 0x10000 ? 2 : 1;
    if (index < unit + width) return width == 2 ? "\xEF\xBF\xBD" : std::string(s.substr(i, len));
    unit += width;
  }
  return {};
}

std::string js_upper(std::string_view s) {
  return map_case(s, [](std::string& out, char32_t c) {
    if (c == 0xDF) {  // ß: the one full mapping templates are likely to meet
      out += "SS";
    } else {
      append_utf8(out, static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))));
    }
  });
}

std::string js_lower(std::string_view s) {
  const std::u32string cps = code_points(s);
  const auto letter = [&](size_t i) {
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cps[i]));
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
  };
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (cps[i] == 0x130) {  // İ: i and a combining dot, the one full lower-case mapping
      out += "i\xCC\x87";
    } else if (cps[i] == 0x3A3 && i > 0 && letter(i - 1) && !(i + 1 < cps.size() && letter(i + 1))) {
      out += "\xCF\x82";  // final sigma: ς at the end of a word
    } else {
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cps[i]))));
    }
  }
  return out;
}

std::string js_title(std::string_view s) {
  std::string out(s);
  const auto word = [](unsigned char c) { return std::isalnum(c) || c == '_'; };
  for (size_t i = 0; i < out.size(); ++i) {
    const bool boundary = i == 0 || !word(static_cast<unsigned char>(out[i - 1]));
    if (boundary && word(static_cast<unsigned char>(out[i])) && out[i] >= 'a' && out[i] <= 'z') out[i] -= 'a' - 'A';
  }
  return out;
}

std::string js_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0) return "0";
  char buf[64];
  const auto end = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific).ptr;
  std::string sci(buf, end);  // shortest round trip: [-]d[.ddd]e[+-]XX
  std::string sign;
  if (sci[0] == '-') sign = "-", sci.erase(0, 1);
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the point
  const int k = static_cast<int>(digits.size());
  const int n = std::atoi(sci.c_str() + e + 1) + 1;  // the decimal point sits after n digits
  if (k <= n && n <= 21) return sign + digits + std::string(n - k, '0');
  if (0 < n && n <= 21) return sign + digits.substr(0, n) + "." + digits.substr(n);
  if (-6 < n && n <= 0) return sign + "0." + std::string(-n, '0') + digits;
  const std::string exponent = (n - 1 >= 0 ? "+" : "-") + std::to_string(std::abs(n - 1));
  return sign + digits.substr(0, 1) + (k > 1 ? "." + digits.substr(1) : "") + "e" + exponent;
}

double js_to_number(std::string_view text) {
  const std::string s = js_trim(text);
  if (s.empty()) return 0;
  if (s == "Infinity" || s == "+Infinity") return INFINITY;
  if (s == "-Infinity") return -INFINITY;
  if (s.size() > 2 && s[0] == '0' && std::string_view("xXoObB").find(s[1]) != std::string_view::npos) {
    const int base = (s[1] == 'x' || s[1] == 'X') ? 16 : (s[1] == 'o' || s[1] == 'O') ? 8 : 2;
    double value = 0;
    for (size_t i = 2; i < s.size(); ++i) {
      const int d = std::isdigit(static_cast<unsigned char>(s[i])) ? s[i] - '0'
                    : std::isxdigit(static_cast<unsigned char>(s[i])) ? std::tolower(s[i]) - 'a' + 10
                                                                       : 99;
      if (d >= base) return NAN;
      value = value * base + d;
    }
    return value;
  }
  return decimal_prefix(s) == s.size() ? parse_decimal(s) : NAN;
}

bool js_parse_int(std::string_view text, double& out) {
  const std::string s = js_trim(text, true, false);
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t j = i;
  while (j < s.size() && is_js_digit(s[j])) ++j;
  if (j == i) return false;
  out = parse_decimal(s.substr(0, j));
  return true;
}

bool js_parse_float(std::string_view text, double& out) {
  const std::string s = js_trim(text, true, false);
  const size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
  if (s.compare(sign, 8, "Infinity") == 0) return out = s[0] == '-' ? -INFINITY : INFINITY, true;
  const size_t n = decimal_prefix(s);
  if (n == 0) return false;
  out = parse_decimal(s.substr(0, n));
  return true;
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

}  // namespace zero::text::jinja
