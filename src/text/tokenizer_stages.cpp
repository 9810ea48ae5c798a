#include "text/tokenizer_stages.h"

#include <utf8proc.h>

#include <array>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "text/regex.h"
#include "text/tokenizer.h"
#include "util/json_from_file.h"
#include "zero/error.h"

namespace zero::text {
namespace {

using nlohmann::json;

[[noreturn]] void not_built(const std::string& path, const std::string& what) {
  throw Error(path + ": " + what + " is not supported by zerocpp's tokenizer", path);
}

std::string type_of(const json& block, const std::string& path) {
  if (!block.is_object() || !block.contains("type") || !block["type"].is_string())
    throw Error(path + ": expected an object with a \"type\"", path);
  return block["type"].get<std::string>();
}

// {"String": s} or {"Regex": r}, as Split, Replace and their decoders carry a pattern.
std::shared_ptr<Regex> pattern_of(const json& block, const std::string& path) {
  if (!block.contains("pattern") || !block["pattern"].is_object())
    throw Error(path + ".pattern: expected {\"String\": ...} or {\"Regex\": ...}", path);
  const json& p = block["pattern"];
  if (p.contains("String"))
    return std::make_shared<Regex>(json_required<std::string>(p, "String", path + ".pattern"), true, path);
  if (p.contains("Regex"))
    return std::make_shared<Regex>(json_required<std::string>(p, "Regex", path + ".pattern"), false, path);
  throw Error(path + ".pattern: expected {\"String\": ...} or {\"Regex\": ...}", path);
}

std::string replace_all(const Regex& pattern, const std::string& text, const std::string& content) {
  std::string out;
  size_t at = 0;
  for (const auto& [begin, end] : pattern.find_all(text)) {
    out.append(text, at, begin - at);
    out += content;
    at = end;
  }
  out.append(text, at, std::string::npos);
  return out;
}

// block[key], which must be a list.
const json& list_of(const json& block, const char* key, const std::string& path) {
  if (!block.contains(key) || !block[key].is_array()) throw Error(path + "." + key + ": must be a list", path);
  return block[key];
}

// A "Sequence" block: the stages of its list `key`, each built by `build`, applied in order.
template <typename Stage, typename Build>
Stage chain(const json& block, const char* key, const std::string& path, Build build) {
  std::vector<Stage> steps;
  const json& list = list_of(block, key, path);
  for (size_t i = 0; i < list.size(); ++i)
    steps.push_back(build(list[i], path + "." + key + "[" + std::to_string(i) + "]"));
  return [steps](auto value) {
    for (const Stage& step : steps) value = step(std::move(value));
    return value;
  };
}

// The tokenizers library's SplitDelimiterBehavior: what becomes of each match and the gaps.
enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior behavior_of(const json& block, const std::string& path) {
  static const std::unordered_map<std::string, Behavior> kNames = {
      {"Removed", Behavior::kRemoved},
      {"Isolated", Behavior::kIsolated},
      {"MergedWithPrevious", Behavior::kMergedWithPrevious},
      {"MergedWithNext", Behavior::kMergedWithNext},
      {"Contiguous", Behavior::kContiguous}};
  const std::string name = json_required<std::string>(block, "behavior", path);
  const auto it = kNames.find(name);
  if (it == kNames.end()) not_built(path + ".behavior", "\"" + name + "\"");
  return it->second;
}

void split_piece(const std::string& piece, const Regex& pattern, Behavior behavior, std::vector<std::string>& out) {
  std::vector<std::pair<std::string, bool>> parts;  // (text, is a match), in order, none empty
  size_t at = 0;
  for (const auto& [begin, end] : pattern.find_all(piece)) {
    if (begin > at) parts.emplace_back(piece.substr(at, begin - at), false);
    parts.emplace_back(piece.substr(begin, end - begin), true);
    at = end;
  }
  if (at < piece.size()) parts.emplace_back(piece.substr(at), false);
  std::vector<std::string> pieces;
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto& [text, is_match] = parts[i];
    switch (behavior) {
      case Behavior::kRemoved:
        if (!is_match) pieces.push_back(text);
        break;
      case Behavior::kIsolated:
        pieces.push_back(text);
        break;
      case Behavior::kMergedWithPrevious:  // a match closes the piece before it
        if (is_match && i > 0 && !parts[i - 1].second)
          pieces.back() += text;
        else
          pieces.push_back(text);
        break;
      case Behavior::kMergedWithNext:  // a match opens the piece after it
        if (!is_match && i > 0 && parts[i - 1].second)
          pieces.back() += text;
        else
          pieces.push_back(text);
        break;
      case Behavior::kContiguous:  // adjacent matches are one piece
        if (is_match && i > 0 && parts[i - 1].second)
          pieces.back() += text;
        else
          pieces.push_back(text);
        break;
    }
  }
  for (std::string& p : pieces) out.push_back(std::move(p));
}

PreTokenize splitter(std::shared_ptr<Regex> pattern, Behavior behavior) {
  return [pattern, behavior](std::vector<std::string> pieces) {
    std::vector<std::string> out;
    for (const std::string& piece : pieces) split_piece(piece, *pattern, behavior, out);
    return out;
  };
}

// GPT-2's pre-tokenization regex, which ByteLevel applies when use_regex is true.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

const std::array<std::string, 256>& byte_chars() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const int code = printable ? b : 256 + extra++;
      utf8proc_uint8_t buffer[4];
      const auto n = utf8proc_encode_char(code, buffer);
      t[static_cast<size_t>(b)] = std::string(reinterpret_cast<char*>(buffer), static_cast<size_t>(n));
    }
    return t;
  }();
  return table;
}

const std::unordered_map<std::string, uint8_t>& char_bytes() {
  static const std::unordered_map<std::string, uint8_t> map = [] {
    std::unordered_map<std::string, uint8_t> m;
    for (int b = 0; b < 256; ++b) m.emplace(byte_chars()[static_cast<size_t>(b)], static_cast<uint8_t>(b));
    return m;
  }();
  return map;
}

// Length-aware (a NUL in the text is a character, not its end).
Normalize unicode_form(int options) {
  return [options](std::string& s) {
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
                     static_cast<utf8proc_option_t>(UTF8PROC_STABLE | options));
    if (n < 0) throw Error(std::string("Unicode normalization failed: ") + utf8proc_errmsg(n));
    s.assign(reinterpret_cast<char*>(out), static_cast<size_t>(n));
    std::free(out);
  };
}

}  // namespace

const std::string& byte_char(uint8_t byte) { return byte_chars()[byte]; }

std::string byte_level_chars(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) out += byte_chars()[b];
  return out;
}

std::string byte_level_bytes(const std::string& token) {
  // A token holding a character outside the alphabet (an added token's text) stands for itself.
  std::string out;
  for (std::string_view c : utf8_chars(token)) {
    const auto it = char_bytes().find(std::string(c));
    if (it == char_bytes().end()) return token;
    out += static_cast<char>(it->second);
  }
  return out;
}

Normalize build_normalizer(const json& block, const std::string& path) {
  if (block.is_null()) return [](std::string&) {};
  const std::string type = type_of(block, path);
  if (type == "Sequence") {
    std::vector<Normalize> steps;
    const json& list = list_of(block, "normalizers", path);
    for (size_t i = 0; i < list.size(); ++i)
      steps.push_back(build_normalizer(list[i], path + ".normalizers[" + std::to_string(i) + "]"));
    return [steps](std::string& s) {
      for (const Normalize& step : steps) step(s);
    };
  }
  if (type == "NFC") return unicode_form(UTF8PROC_COMPOSE);
  if (type == "NFD") return unicode_form(UTF8PROC_DECOMPOSE);
  if (type == "NFKC") return unicode_form(UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD") return unicode_form(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Prepend") {
    const std::string prefix = json_required<std::string>(block, "prepend", path);
    return [prefix](std::string& s) {
      if (!s.empty()) s.insert(0, prefix);
    };
  }
  if (type == "Replace") {
    auto pattern = pattern_of(block, path);
    const std::string content = json_required<std::string>(block, "content", path);
    return [pattern, content](std::string& s) { s = replace_all(*pattern, s, content); };
  }
  not_built(path, "the normalizer \"" + type + "\"");
}

PreTokenize build_pre_tokenizer(const json& block, const std::string& path) {
  if (block.is_null()) return [](std::vector<std::string> pieces) { return pieces; };
  const std::string type = type_of(block, path);
  if (type == "Sequence") return chain<PreTokenize>(block, "pretokenizers", path, build_pre_tokenizer);
  if (type == "Split") {
    if (json_field<bool>(block, "invert", false, path)) not_built(path + ".invert", "true");
    return splitter(pattern_of(block, path), behavior_of(block, path));
  }
  if (type == "Digits") {  // Rust's char::is_numeric is Unicode's N categories
    const bool individual = json_field<bool>(block, "individual_digits", false, path);
    return splitter(std::make_shared<Regex>(R"(\p{N})", false, path),
                    individual ? Behavior::kIsolated : Behavior::kContiguous);
  }
  if (type == "ByteLevel") {
    const bool prefix_space = json_field<bool>(block, "add_prefix_space", true, path);
    const bool use_regex = json_field<bool>(block, "use_regex", true, path);
    auto split = use_regex ? splitter(std::make_shared<Regex>(kGpt2Pattern, false, path), Behavior::kIsolated)
                           : PreTokenize([](std::vector<std::string> p) { return p; });
    return [prefix_space, split](std::vector<std::string> pieces) {
      if (prefix_space)
        for (std::string& p : pieces)
          if (!p.starts_with(' ')) p.insert(0, " ");
      std::vector<std::string> out = split(std::move(pieces));
      for (std::string& p : out) p = byte_level_chars(p);
      return out;
    };
  }
  not_built(path, "the pre-tokenizer \"" + type + "\"");
}

Decode build_decoder(const json& block, const std::string& path) {
  if (block.is_null()) {  // the library joins the tokens with spaces
    return [](std::vector<std::string> tokens) {
      std::string joined;
      for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
      return std::vector<std::string>{joined};
    };
  }
  const std::string type = type_of(block, path);
  if (type == "Sequence") return chain<Decode>(block, "decoders", path, build_decoder);
  if (type == "ByteLevel") {
    return [](std::vector<std::string> tokens) {
      std::string bytes;
      for (const std::string& t : tokens) bytes += byte_level_bytes(t);
      return std::vector<std::string>{valid_utf8(bytes)};
    };
  }
  if (type == "Replace") {
    auto pattern = pattern_of(block, path);
    const std::string content = json_required<std::string>(block, "content", path);
    return [pattern, content](std::vector<std::string> tokens) {
      for (std::string& t : tokens) t = replace_all(*pattern, t, content);
      return tokens;
    };
  }
  if (type == "ByteFallback") {  // runs of <0xXX> tokens become their bytes, or one U+FFFD each
    return [](std::vector<std::string> tokens) {
      std::vector<std::string> out;
      std::string bytes;
      size_t count = 0;
      const auto flush = [&] {
        if (count == 0) return;
        if (valid_utf8(bytes) == bytes) {
          out.push_back(bytes);
        } else {
          for (size_t i = 0; i < count; ++i) out.emplace_back("\xEF\xBF\xBD");
        }
        bytes.clear();
        count = 0;
      };
      for (std::string& t : tokens) {
        if (t.size() == 6 && t.starts_with("<0x") && t.ends_with(">") && std::isxdigit(t[3]) && std::isxdigit(t[4])) {
          bytes += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
          ++count;
          continue;
        }
        flush();
        out.push_back(std::move(t));
      }
      flush();
      return out;
    };
  }
  if (type == "Fuse") {
    return [](std::vector<std::string> tokens) {
      std::string joined;
      for (const std::string& t : tokens) joined += t;
      return std::vector<std::string>{joined};
    };
  }
  if (type == "Strip") {  // up to `start` leading and `stop` trailing `content` characters of each token
    const std::string content = json_required<std::string>(block, "content", path);
    const size_t start = json_field<size_t>(block, "start", size_t{0}, path),
                 stop = json_field<size_t>(block, "stop", size_t{0}, path);
    return [content, start, stop](std::vector<std::string> tokens) {
      for (std::string& t : tokens) {
        std::vector<std::string_view> chars = utf8_chars(t);
        size_t from = 0, to = chars.size();
        while (from < start && from < to && chars[from] == content) ++from;
        while (chars.size() - to < stop && to > from && chars[to - 1] == content) --to;
        std::string kept;
        for (size_t i = from; i < to; ++i) kept += chars[i];
        t = std::move(kept);
      }
      return tokens;
    };
  }
  not_built(path, "the decoder \"" + type + "\"");
}

PostProcess build_post_processor(const json& block, const std::string& path) {
  if (block.is_null()) return [](std::vector<int32_t> ids) { return ids; };
  const std::string type = type_of(block, path);
  if (type == "ByteLevel") return [](std::vector<int32_t> ids) { return ids; };  // offsets only
  if (type == "Sequence") return chain<PostProcess>(block, "processors", path, build_post_processor);
  if (type == "TemplateProcessing") {
    // The single-sequence template: special tokens' ids around $A (sequence "A").
    std::vector<std::vector<int32_t>> before, after;
    bool seen_sequence = false;
    const json& single = list_of(block, "single", path);
    for (size_t i = 0; i < single.size(); ++i) {
      const json& item = single[i];
      const std::string where = path + ".single[" + std::to_string(i) + "]";
      if (item.contains("Sequence")) {
        if (json_required<std::string>(item["Sequence"], "id", where + ".Sequence") != "A" || seen_sequence)
          not_built(where, "a template other than one $A");
        seen_sequence = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = json_required<std::string>(item["SpecialToken"], "id", where + ".SpecialToken");
        if (!block.contains("special_tokens") || !block["special_tokens"].is_object())
          throw Error(path + ".special_tokens: must be an object", path);
        const auto special = block["special_tokens"].find(name);
        if (special == block["special_tokens"].end())
          throw Error(where + ": the special token " + name + " is not in special_tokens", where);
        (seen_sequence ? after : before)
            .push_back(json_required<std::vector<int32_t>>(*special, "ids", path + ".special_tokens." + name));
      } else {
        not_built(where, "this template item");
      }
    }
    return [before, after](std::vector<int32_t> ids) {
      std::vector<int32_t> out;
      for (const auto& s : before) out.insert(out.end(), s.begin(), s.end());
      out.insert(out.end(), ids.begin(), ids.end());
      for (const auto& s : after) out.insert(out.end(), s.begin(), s.end());
      return out;
    };
  }
  not_built(path, "the post-processor \"" + type + "\"");
}

}  // namespace zero::text
