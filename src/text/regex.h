// PCRE2 (with its JIT) for the patterns tokenizer.json carries: Unicode classes (\p{L}, \p{N}),
// lookahead and case-insensitive groups, as the `tokenizers` library's Oniguruma reads them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zero::text {

class Regex {
 public:
  // literal: match the pattern's characters as they are (a {"String": ...} pattern).
  // what: where the pattern comes from, for the error when it does not compile.
  Regex(const std::string& pattern, bool literal, const std::string& what);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Every non-overlapping match, left to right, as [begin, end) byte offsets into valid UTF-8.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace zero::text
