#include "config/hjson.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

#include "zero/error.h"

namespace zero::config_detail {
namespace {

using nlohmann::json;

constexpr int kMaxDepth = 256;

bool is_punctuator(char c) { return c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == ':'; }
// Hjson counts every control character as whitespace.
bool is_white(char c) { return c != '\0' && static_cast<unsigned char>(c) <= ' '; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The length of the Unicode space (Go's unicode.IsSpace, as Hjson's strings.TrimSpace uses) that
// `s` starts with, or 0.
size_t leading_space(std::string_view s) {
  if (s.empty()) return 0;
  unsigned char c = static_cast<unsigned char>(s[0]);
  if (c == ' ' || (c >= '\t' && c <= '\r')) return 1;
  static constexpr std::string_view kWide[] = {"\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002",
                                               "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008",
                                               "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f",
                                               "\u3000"};
  for (std::string_view w : kWide) {
    if (s.substr(0, w.size()) == w) return w.size();
  }
  return 0;
}

size_t trailing_space(std::string_view s) {
  for (size_t length = 1; length <= 3 && length <= s.size(); ++length) {
    if (leading_space(s.substr(s.size() - length)) == length) return length;
  }
  return 0;
}

std::string_view trim(std::string_view s) {
  while (size_t n = leading_space(s)) s.remove_prefix(n);
  while (size_t n = trailing_space(s)) s.remove_suffix(n);
  return s;
}

// Hjson's number: -?(0|[1-9][0-9]*)(\.[0-9]*)?([eE][+-]?[0-9]*)?, and the whole of it must
// convert (so "1e" is a string) to a finite double (so "1e400" is a string too). Only control
// characters and spaces may follow it (Hjson's rule, narrower than the trim of a string).
std::optional<json> as_number(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  size_t int_start = i;
  while (i < s.size() && is_digit(s[i])) ++i;
  size_t int_digits = i - int_start;
  if (int_digits == 0 || (int_digits > 1 && s[int_start] == '0')) return std::nullopt;
  bool whole = true;
  if (i < s.size() && s[i] == '.') {
    whole = false;
    for (++i; i < s.size() && is_digit(s[i]); ++i) {
    }
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    whole = false;
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    while (i < s.size() && is_digit(s[i])) ++i;
  }
  for (size_t rest = i; rest < s.size(); ++rest) {
    if (static_cast<unsigned char>(s[rest]) > ' ') return std::nullopt;
  }
  s = s.substr(0, i);
  if (whole) {
    int64_t value = 0;
    auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (error == std::errc() && end == s.data() + s.size()) return json(value);
    uint64_t unsigned_value = 0;
    auto [uend, uerror] = std::from_chars(s.data(), s.data() + s.size(), unsigned_value);
    if (uerror == std::errc() && uend == s.data() + s.size()) return json(unsigned_value);
  }
  // strtod needs a terminated string; the program never changes the "C" locale.
  std::string text(s);
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || std::isinf(value)) return std::nullopt;
  return json(value);
}

// The offset of the first byte that is not part of valid UTF-8, or npos.
size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    unsigned char c = byte(i);
    size_t length = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (length == 0 || i + length > s.size()) return i;
    uint32_t point = length == 1 ? c : c & (0x7F >> length);
    for (size_t k = 1; k < length; ++k) {
      if ((byte(i + k) & 0xC0) != 0x80) return i;
      point = (point << 6) | (byte(i + k) & 0x3F);
    }
    static constexpr uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (point < kSmallest[length] || point > 0x10FFFF || (point >= 0xD800 && point <= 0xDFFF)) return i;
    i += length;
  }
  return std::string_view::npos;
}

void append_utf8(std::string& out, uint32_t point) {
  if (point < 0x80) {
    out += static_cast<char>(point);
  } else if (point < 0x800) {
    out += static_cast<char>(0xC0 | (point >> 6));
    out += static_cast<char>(0x80 | (point & 0x3F));
  } else if (point < 0x10000) {
    out += static_cast<char>(0xE0 | (point >> 12));
    out += static_cast<char>(0x80 | ((point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (point >> 18));
    out += static_cast<char>(0x80 | ((point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (point & 0x3F));
  }
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& origin) : text_(text), origin_(origin) {}

  json parse_root() {
    if (size_t bad = invalid_utf8_at(text_); bad != std::string_view::npos) {
      fail(bad, "the file is not valid UTF-8");
    }
    if (size_t nul = text_.find('\0'); nul != std::string_view::npos) fail(nul, "a NUL byte");
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;  // a byte-order mark, as editors on Windows write
    skip_white();
    if (ch() == '{' || ch() == '[') {
      json value = ch() == '{' ? read_object(false, 1) : read_array(1);
      check_trailing();
      return value;
    }
    // Hjson lets the root object go without braces; failing that the root is one value.
    size_t start = pos_;
    try {
      json value = read_object(true, 1);
      check_trailing();
      return value;
    } catch (const ConfigError& braceless_error) {
      // A duplicate key is no reason to read the file another way (DeepSpeed raises on it too).
      if (braceless_error.problems().front().find("duplicate key") != std::string::npos) throw;
      pos_ = start;
      keys_.clear();
      try {
        json value = read_value(1);
        check_trailing();
        return value;
      } catch (const ConfigError&) {
        throw braceless_error;
      }
    }
  }

 private:
  char at(size_t i) const { return i < text_.size() ? text_[i] : '\0'; }
  char ch() const { return at(pos_); }

  [[noreturn]] void fail(size_t where, const std::string& message) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < where && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string in = keys_.empty() ? "" : " (in " + path() + ")";
    throw ConfigError(origin_, {"invalid Hjson/JSON at line " + std::to_string(line) + ", column " +
                                std::to_string(column) + ": " + message + in});
  }

  std::string path() const {
    std::string out;
    for (const auto& key : keys_) out += (out.empty() || key.front() == '[' ? "" : ".") + key;
    return out;
  }

  // Whitespace and comments (which run to the end of the line, or to "*/").
  void skip_white() {
    for (;;) {
      while (is_white(ch())) ++pos_;
      if (ch() == '#' || (ch() == '/' && at(pos_ + 1) == '/')) {
        while (ch() != '\0' && ch() != '\n') ++pos_;
      } else if (ch() == '/' && at(pos_ + 1) == '*') {
        size_t end = text_.find("*/", pos_ + 2);
        pos_ = end == std::string_view::npos ? text_.size() : end + 2;
      } else {
        return;
      }
    }
  }

  void check_trailing() {
    skip_white();
    if (ch() != '\0') fail(pos_, std::string("unexpected '") + ch() + "' after the end of the top-level value");
  }

  json read_value(int depth) {
    skip_white();
    if (depth > kMaxDepth) fail(pos_, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
    switch (ch()) {
      case '{':
        return read_object(false, depth + 1);
      case '[':
        return read_array(depth + 1);
      case '"':
      case '\'':
        return read_quoted(true);
      default:
        return read_quoteless();
    }
  }

  // The members of an object, with or without the braces. Separated by commas or line ends.
  json read_object(bool braceless, int depth) {
    size_t open = pos_;
    json object = json::object();
    if (!braceless) {
      ++pos_;
      skip_white();
      if (ch() == '}') {
        ++pos_;
        return object;
      }
    }
    while (ch() != '\0') {
      size_t key_at = pos_;
      std::string key = read_key();
      skip_white();
      if (ch() != ':') fail(pos_, "expected ':' after the key \"" + key + "\"");
      ++pos_;
      keys_.push_back(key);
      json value = read_value(depth);
      if (object.contains(key)) fail(key_at, "duplicate key \"" + key + "\"");
      keys_.pop_back();
      object[key] = std::move(value);
      skip_white();
      if (ch() == ',') {
        ++pos_;
        skip_white();
      }
      if (ch() == '}' && !braceless) {
        ++pos_;
        return object;
      }
    }
    if (!braceless) fail(open, "this '{' is never closed");
    return object;
  }

  json read_array(int depth) {
    size_t open = pos_;
    json array = json::array();
    ++pos_;
    skip_white();
    if (ch() == ']') {
      ++pos_;
      return array;
    }
    while (ch() != '\0') {
      keys_.push_back("[" + std::to_string(array.size()) + "]");
      array.push_back(read_value(depth));
      keys_.pop_back();
      skip_white();
      if (ch() == ',') {
        ++pos_;
        skip_white();
      }
      if (ch() == ']') {
        ++pos_;
        return array;
      }
    }
    fail(open, "this '[' is never closed");
  }

  std::string read_key() {
    if (ch() == '"' || ch() == '\'') return read_quoted(false);
    size_t start = pos_;
    std::string name;
    size_t space_at = std::string::npos;  // length of the name when whitespace first followed it
    for (;; ++pos_) {
      char c = ch();
      if (c == ':') {
        if (name.empty()) fail(pos_, "found ':' but no key before it");
        if (space_at != std::string::npos && space_at != name.size()) {
          fail(start, "a key without quotes cannot hold whitespace (quote it)");
        }
        return name;
      }
      if (c == '\0') fail(pos_, "the file ends where a key was expected");
      if (is_white(c)) {
        if (space_at == std::string::npos) space_at = name.size();
      } else if (is_punctuator(c)) {
        fail(pos_, std::string("found '") + c + "' where a key was expected");
      } else {
        name += c;
      }
    }
  }

  // A value without quotes: the rest of the line, unless what precedes a ',', '}', ']' or a
  // comment on it is a literal (true, false, null, a number).
  json read_quoteless() {
    char first = ch();
    if (first == '\0') fail(pos_, "the file ends where a value was expected");
    if (is_punctuator(first)) fail(pos_, std::string("found '") + first + "' where a value was expected");
    size_t start = pos_;
    for (;;) {
      ++pos_;
      char c = ch();
      bool line_end = c == '\r' || c == '\n' || c == '\0';
      if (line_end || c == ',' || c == '}' || c == ']' || c == '#' ||
          (c == '/' && (at(pos_ + 1) == '/' || at(pos_ + 1) == '*'))) {
        std::string_view raw = text_.substr(start, pos_ - start);
        std::string_view text = trim(raw);
        if (first == 't' && text == "true") return true;
        if (first == 'f' && text == "false") return false;
        if (first == 'n' && text == "null") return nullptr;
        if (first == '-' || is_digit(first)) {
          if (auto number = as_number(raw)) return *number;
        }
        if (line_end) return std::string(text);
      }
    }
  }

  // A string in "..." or '...' (JSON's escapes, plus \'), or a ''' multiline string.
  std::string read_quoted(bool allow_multiline) {
    size_t open = pos_;
    char quote = ch();
    ++pos_;
    if (allow_multiline && quote == '\'' && ch() == '\'' && at(pos_ + 1) == '\'') {
      pos_ += 2;
      return read_multiline(open);
    }
    std::string out;
    for (;;) {
      char c = ch();
      if (c == '\0') fail(open, "this string is never closed");
      if (c == quote) {
        ++pos_;
        return out;
      }
      if (c == '\n' || c == '\r') fail(pos_, "a quoted string cannot span lines (use ''' for that)");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      char e = ch();
      if (e == '\0') fail(open, "this string is never closed");
      ++pos_;
      switch (e) {
        case '"':
        case '\'':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          append_utf8(out, read_escaped_point());
          break;
        default:
          fail(pos_ - 2, std::string("unknown escape \\") + e);
      }
    }
  }

  // After "\u": four hex digits, and a second \uXXXX when they are a high surrogate.
  uint32_t read_escaped_point() {
    auto hex4 = [&] {
      uint32_t value = 0;
      for (int k = 0; k < 4; ++k, ++pos_) {
        char h = ch();
        int digit = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (digit < 0) fail(pos_, "\\u needs four hex digits");
        value = value * 16 + static_cast<uint32_t>(digit);
      }
      return value;
    };
    size_t escape_at = pos_ - 2;
    uint32_t point = hex4();
    if (point >= 0xDC00 && point <= 0xDFFF) fail(escape_at, "\\u escape of a lone low surrogate");
    if (point < 0xD800 || point > 0xDBFF) return point;
    if (ch() != '\\' || at(pos_ + 1) != 'u') fail(escape_at, "\\u escape of a lone high surrogate");
    pos_ += 2;
    uint32_t low = hex4();
    if (low < 0xDC00 || low > 0xDFFF) fail(escape_at, "\\u escape of a lone high surrogate");
    return 0x10000 + ((point - 0xD800) << 10) + (low - 0xDC00);
  }

  // After the opening '''. The indentation of the ''' is removed from every line; a first line
  // holding only whitespace and the last line break are dropped; \r is dropped.
  std::string read_multiline(size_t open) {
    size_t line_start = open == 0 ? 0 : text_.rfind('\n', open - 1);
    line_start = line_start == std::string_view::npos || open == 0 ? 0 : line_start + 1;
    size_t indent = open - line_start;
    auto skip_indent = [&] {
      for (size_t skip = indent; skip > 0 && is_white(ch()) && ch() != '\n'; --skip) ++pos_;
    };
    while (is_white(ch()) && ch() != '\n') ++pos_;
    if (ch() == '\n') {
      ++pos_;
      skip_indent();
    }
    std::string out;
    int quotes = 0;
    bool last_was_line_break = false;
    for (;;) {
      char c = ch();
      if (c == '\0') fail(open, "this ''' string is never closed");
      if (c == '\'') {
        ++pos_;
        if (++quotes == 3) {
          if (last_was_line_break) out.pop_back();
          return out;
        }
        continue;
      }
      for (; quotes > 0; --quotes) {
        out += '\'';
        last_was_line_break = false;
      }
      ++pos_;
      if (c == '\n') {
        out += '\n';
        last_was_line_break = true;
        skip_indent();
      } else if (c != '\r') {
        out += c;
        last_was_line_break = false;
      }
    }
  }

  std::string_view text_;
  const std::string& origin_;
  size_t pos_ = 0;
  std::vector<std::string> keys_;  // where the value being read sits, for messages
};

}  // namespace

json parse_hjson(std::string_view text, const std::string& origin) { return Parser(text, origin).parse_root(); }

}  // namespace zero::config_detail
