// The chat-template lexer. Hugging Face renders templates with trim_blocks and lstrip_blocks;
// the reference applies them to the source text before cutting tokens (one trailing newline
// dropped, indentation before `{%`/`{#` removed, the newline after `%}`/`#}` removed), and we
// do the same so that whitespace comes out byte for byte as it does there. It also drops
// `{% generation %}` and `{% endgeneration %}` (transformers' marks for assistant masks), so do we. Each byte keeps the
// line it had in the template as written, for error messages.
#include "text/jinja/lexer.h"

#include <array>
#include <utility>

#include "text/jinja/js.h"
#include "text/tokenizer.h"
#include "zero/error.h"

namespace zero::text::jinja {
namespace {

struct Source {
  std::string text;
  std::vector<int> lines;  // lines[i]: the line of text[i] in the template as written
};

bool line_break_before(const Source& s, size_t i) {
  if (i == 0) return true;
  const char c = s.text[i - 1];
  if (c == '\n' || c == '\r') return true;
  // JavaScript's multiline ^ also starts a line after U+2028 and U+2029.
  return i >= 3 && s.text.compare(i - 3, 2, "\xE2\x80") == 0 && (c == '\xA8' || c == '\xA9');
}

void append(Source& to, const Source& from, size_t begin, size_t end) {
  to.text.append(from.text, begin, end - begin);
  to.lines.insert(to.lines.end(), from.lines.begin() + begin, from.lines.begin() + end);
}

// The end of a `{%-? (end)?generation -?%}` tag at s[i], or 0; `strip_*`: its `-` marks.
size_t generation_tag(const std::string& s, size_t i, bool& strip_before, bool& strip_after) {
  if (s.compare(i, 2, "{%") != 0) return 0;
  i += 2;
  strip_before = i < s.size() && s[i] == '-';
  if (strip_before) ++i;
  while (size_t n = js_space_at(s, i)) i += n;
  if (s.compare(i, 3, "end") == 0) i += 3;
  if (s.compare(i, 10, "generation") != 0) return 0;
  i += 10;
  while (size_t n = js_space_at(s, i)) i += n;
  strip_after = i < s.size() && s[i] == '-';
  if (strip_after) ++i;
  return s.compare(i, 2, "%}") == 0 ? i + 2 : 0;
}

// /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs → the spaces the `-` marks do not strip.
Source strip_generation_tags(const Source& in) {
  Source out;
  size_t i = 0;
  while (i < in.text.size()) {
    size_t tag = i;
    while (size_t n = js_space_at(in.text, tag)) tag += n;
    bool strip_before = false, strip_after = false;
    const size_t end = generation_tag(in.text, tag, strip_before, strip_after);
    if (end == 0) {  // one character on
      const auto lead = static_cast<unsigned char>(in.text[i]);
      const size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      append(out, in, i, std::min(i + n, in.text.size()));
      i += n;
      continue;
    }
    size_t after = end;
    while (size_t n = js_space_at(in.text, after)) after += n;
    if (!strip_before) append(out, in, i, tag);
    if (!strip_after) append(out, in, end, after);
    i = after;
  }
  return out;
}

Source preprocess(std::string_view template_text) {
  Source in;
  int line = 1;
  for (char c : template_text) {
    in.text += c;
    in.lines.push_back(line);
    if (c == '\n') ++line;
  }
  if (!in.text.empty() && in.text.back() == '\n') in.text.pop_back(), in.lines.pop_back();

  Source stripped;  // lstrip_blocks: /^[ \t]*({[#%-])/gm → $1
  for (size_t i = 0; i < in.text.size();) {
    if (line_break_before(in, i)) {
      size_t j = i;
      while (j < in.text.size() && (in.text[j] == ' ' || in.text[j] == '\t')) ++j;
      if (j + 1 < in.text.size() && in.text[j] == '{' && (in.text[j + 1] == '#' || in.text[j + 1] == '%' || in.text[j + 1] == '-'))
        i = j;
    }
    stripped.text += in.text[i];
    stripped.lines.push_back(in.lines[i]);
    ++i;
  }

  Source out;  // trim_blocks: /([#%-]})\n/g → $1
  for (size_t i = 0; i < stripped.text.size(); ++i) {
    out.text += stripped.text[i];
    out.lines.push_back(stripped.lines[i]);
    const char c = stripped.text[i];
    if ((c == '#' || c == '%' || c == '-') && i + 2 < stripped.text.size() && stripped.text[i + 1] == '}' &&
        stripped.text[i + 2] == '\n') {
      out.text += '}';
      out.lines.push_back(stripped.lines[i + 1]);
      i += 2;
    }
  }
  return strip_generation_tags(out);
}

constexpr std::array<std::pair<std::string_view, Tok>, 29> kSymbols = {{
    {"{%", Tok::OpenStatement}, {"%}", Tok::CloseStatement}, {"{{", Tok::OpenExpression}, {"}}", Tok::CloseExpression},
    {"(", Tok::OpenParen}, {")", Tok::CloseParen}, {"{", Tok::OpenBrace}, {"}", Tok::CloseBrace},
    {"[", Tok::OpenBracket}, {"]", Tok::CloseBracket}, {",", Tok::Comma}, {".", Tok::Dot}, {":", Tok::Colon},
    {"|", Tok::Pipe}, {"<=", Tok::Comparison}, {">=", Tok::Comparison}, {"==", Tok::Comparison},
    {"!=", Tok::Comparison}, {"<", Tok::Comparison}, {">", Tok::Comparison}, {"+", Tok::Additive},
    {"-", Tok::Additive}, {"~", Tok::Additive}, {"**", Tok::Power}, {"*", Tok::Multiplicative},
    {"//", Tok::Multiplicative}, {"/", Tok::Multiplicative}, {"%", Tok::Multiplicative}, {"=", Tok::Equals},
}};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_word(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

class Lexer {
 public:
  explicit Lexer(Source src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    while (pos_ < s_.text.size()) {
      const bool after_tag = tokens_.empty() || last() == Tok::CloseStatement || last() == Tok::CloseExpression ||
                             last() == Tok::Comment;
      if (after_tag && text()) continue;
      if (at("{#")) {
        comment();
        continue;
      }
      if (at("{%-") || at("{{-")) {
        strip_trailing_space();
        push(s_.text[pos_ + 1] == '%' ? Tok::OpenStatement : Tok::OpenExpression, s_.text.substr(pos_, 2));
        if (s_.text[pos_ + 1] == '{') brace_depth_ = 0;
        pos_ += 3;
        continue;
      }
      while (size_t n = js_space_at(s_.text, pos_)) pos_ += n;
      if (pos_ >= s_.text.size()) break;
      if (at("-%}") || at("-}}")) {
        push(s_.text[pos_ + 1] == '%' ? Tok::CloseStatement : Tok::CloseExpression, s_.text.substr(pos_ + 1, 2));
        pos_ += 3;
        while (size_t n = js_space_at(s_.text, pos_)) pos_ += n;
        continue;
      }
      if (signed_number()) continue;
      if (symbol()) continue;
      const char c = s_.text[pos_];
      if (c == '\'' || c == '"') {
        string_literal(c);
      } else if (is_digit(c)) {
        number();
      } else if (is_word(c)) {
        const size_t start = pos_;
        while (pos_ < s_.text.size() && is_word(s_.text[pos_])) ++pos_;
        push(Tok::Name, s_.text.substr(start, pos_ - start), start);
      } else {
        fail("unexpected character '" + character_at(pos_) + "'");
      }
    }
    return std::move(tokens_);
  }

 private:
  Tok last() const { return tokens_.back().type; }
  bool at(std::string_view seq) const { return s_.text.compare(pos_, seq.size(), seq) == 0; }
  int line(size_t at) const { return s_.lines.empty() ? 1 : s_.lines[std::min(at, s_.lines.size() - 1)]; }
  void push(Tok type, std::string value) { push(type, std::move(value), pos_); }
  void push(Tok type, std::string value, size_t at) { tokens_.push_back({type, std::move(value), line(at)}); }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("chat template: " + what + " at line " + std::to_string(line(pos_)));
  }

  std::string character_at(size_t i) const {
    const auto lead = static_cast<unsigned char>(s_.text[i]);
    const size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    return s_.text.substr(i, n);
  }

  bool text() {
    const size_t start = pos_;
    while (pos_ < s_.text.size() && !(s_.text[pos_] == '{' && pos_ + 1 < s_.text.size() &&
                                       (s_.text[pos_ + 1] == '%' || s_.text[pos_ + 1] == '{' || s_.text[pos_ + 1] == '#')))
      ++pos_;
    if (pos_ == start) return false;
    push(Tok::Text, s_.text.substr(start, pos_ - start), start);
    return true;
  }

  // `{%-`, `{{-` and `{#-` remove the whitespace before them (JavaScript's trimEnd).
  void strip_trailing_space() {
    if (tokens_.empty() || last() != Tok::Text) return;
    tokens_.back().value = js_trim(tokens_.back().value, false, true);
    if (tokens_.back().value.empty()) tokens_.pop_back();
  }

  void comment() {
    const size_t start = pos_;
    pos_ += 2;
    const bool strip_before = pos_ < s_.text.size() && s_.text[pos_] == '-';
    if (strip_before) ++pos_;
    const size_t end = s_.text.find("#}", pos_);
    if (end == std::string::npos) pos_ = start, fail("a comment without its closing '#}'");
    const bool strip_after = end > pos_ && s_.text[end - 1] == '-';
    if (strip_before) strip_trailing_space();
    push(Tok::Comment, {}, start);
    pos_ = end + 2;
    if (strip_after)
      while (size_t n = js_space_at(s_.text, pos_)) pos_ += n;
  }

  // A sign after an operator or an opening token is part of a number (`[-1]`) or a unary operator.
  bool signed_number() {
    const char c = s_.text[pos_];
    if (c != '-' && c != '+') return false;
    if (tokens_.empty() || last() == Tok::Text) fail("unexpected character '" + character_at(pos_) + "'");
    switch (last()) {
      case Tok::Name: case Tok::Number: case Tok::String: case Tok::CloseParen: case Tok::CloseBracket: return false;
      default: break;
    }
    const size_t start = pos_++;
    std::string digits = take_digits();
    if (!digits.empty() && pos_ + 1 < s_.text.size() && s_.text[pos_] == '.' && is_digit(s_.text[pos_ + 1])) {
      ++pos_;
      digits += "." + take_digits();
    }
    push(digits.empty() ? Tok::Unary : Tok::Number, c + digits, start);
    return true;
  }

  bool symbol() {
    for (const auto& [seq, type] : kSymbols) {
      if (seq == "}}" && brace_depth_ > 0) continue;
      if (!at(seq)) continue;
      if (type == Tok::OpenExpression) brace_depth_ = 0;
      if (type == Tok::OpenBrace) ++brace_depth_;
      if (type == Tok::CloseBrace) --brace_depth_;
      push(type, std::string(seq));
      pos_ += seq.size();
      return true;
    }
    return false;
  }

  std::string take_digits() {
    const size_t start = pos_;
    while (pos_ < s_.text.size() && is_digit(s_.text[pos_])) ++pos_;
    return s_.text.substr(start, pos_ - start);
  }

  void number() {
    const size_t start = pos_;
    std::string digits = take_digits();
    if (last_is(Tok::Dot) == false && pos_ + 1 < s_.text.size() && s_.text[pos_] == '.' && is_digit(s_.text[pos_ + 1])) {
      ++pos_;
      digits += "." + take_digits();
    }
    push(Tok::Number, digits, start);
  }
  bool last_is(Tok t) const { return !tokens_.empty() && last() == t; }

  void string_literal(char quote) {
    const size_t start = pos_++;
    std::string value;
    while (pos_ < s_.text.size() && s_.text[pos_] != quote) {
      if (s_.text[pos_] != '\\') {
        value += s_.text[pos_++];
        continue;
      }
      if (++pos_ >= s_.text.size()) break;
      const char e = s_.text[pos_++];
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\'': case '"': case '\\': value += e; break;
        case 'x': case 'u': value += hex_escape(e == 'x' ? 2 : 4); break;
        default: fail(std::string("unsupported escape '\\") + e + "' in a string");
      }
    }
    if (pos_ >= s_.text.size()) pos_ = start, fail("a string without its closing quote");
    ++pos_;
    push(Tok::String, std::move(value), start);
  }

  std::string hex_escape(size_t length) {
    const std::string hex = s_.text.substr(pos_, length);
    if (hex.size() != length || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      fail("invalid hexadecimal escape in a string");
    pos_ += length;
    const char32_t c = static_cast<char32_t>(std::stoul(hex, nullptr, 16));
    if (c >= 0xD800 && c <= 0xDFFF) fail("a surrogate escape (\\u" + hex + ") in a string is not supported");
    return utf8(std::u32string(1, c));
  }

  Source s_;
  size_t pos_ = 0;
  int brace_depth_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

// Note: ill-formed UTF-8 reads as U+FFFD, as Node reads such a file.
std::vector<Token> tokenize(std::string_view source) { return Lexer(preprocess(valid_utf8(source))).run(); }

}  // namespace zero::text::jinja
