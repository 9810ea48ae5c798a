// zerocpp's tokenizer (src/text/) against Hugging Face's: real tokenizer files from public npm
// packages and what the tokenizers library itself (its Rust code, through its Node binding) makes
// of 429 texts (tests/reference/tokenizers/make_cases.sh, a CTest fixture; ZERO_TOKENIZER_CASES
// names its directory); and small hand-computed cases of the BPE model and the errors.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "zero/error.h"

namespace fs = std::filesystem;
using nlohmann::json;
using zero::text::Tokenizer;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return ids.size() > 40 ? s + " ..." : s;
}

fs::path write_tokenizer(const json& doc) {
  static int n = 0;
  const fs::path dir = fs::temp_directory_path() / ("zero_tok_" + std::to_string(getpid()) + "_" + std::to_string(n++));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << doc.dump();
  return dir;
}

// A toy BPE over a handful of tokens; `extra` is merged into the document.
json toy(const json& extra = json::object()) {
  json doc = {{"model",
               {{"type", "BPE"},
                {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"aa", 6}, {"<0x41>", 7}}},
                {"merges", {"b c", "a b", "a bc", "a a"}}}},
              {"added_tokens", json::array()}};
  doc.merge_patch(extra);
  return doc;
}

}  // namespace

TEST(TokenizerReference, EveryTextAsTheTokenizersLibraryEncodesAndDecodesIt) {
  const char* cases = std::getenv("ZERO_TOKENIZER_CASES");
  ASSERT_NE(cases, nullptr) << "ZERO_TOKENIZER_CASES must name make_cases.sh's output";
  int models = 0;
  for (const auto& entry : fs::directory_iterator(cases)) {
    if (entry.path().filename() == "texts") continue;
    ++models;
    const std::string model = entry.path().filename().string();
    const Tokenizer tokenizer = Tokenizer::load(entry.path().string());
    const json expected = json::parse(read_file(entry.path() / "expected.json"));
    int wrong = 0;
    for (const json& c : expected["cases"]) {
      const std::string file = c["text"].get<std::string>();
      const std::string text = read_file(fs::path(cases) / "texts" / file);
      const auto ids = c["ids"].get<std::vector<int32_t>>(), special = c["ids_special"].get<std::vector<int32_t>>();
      const auto got = tokenizer.encode(text), got_special = tokenizer.encode(text, true);
      const std::string decoded = tokenizer.decode(special), skipped = tokenizer.decode(special, true);
      const bool ok = got == ids && got_special == special && decoded == c["decoded"] &&
                      skipped == c["decoded_skip_special"];
      if (!ok && ++wrong <= 5) {
        ADD_FAILURE() << model << " " << file << ":\n  ids      " << ids_text(got) << "\n  expected " << ids_text(ids)
                      << "\n  with specials " << ids_text(got_special) << "\n  expected      " << ids_text(special)
                      << "\n  decoded " << json(decoded).dump() << "\n  expected " << c["decoded"].dump()
                      << "\n  skipping specials " << json(skipped).dump() << "\n  expected " << c["decoded_skip_special"].dump();
      }
    }
    EXPECT_EQ(wrong, 0) << model << ": " << wrong << " of " << expected["cases"].size() << " texts differ";
  }
  EXPECT_EQ(models, 6);
}

TEST(Tokenizer, MergesLowestRankFirstAndLeftmostAmongEquals) {
  const Tokenizer t = Tokenizer::load(write_tokenizer(toy()).string());
  // "abc": (b,c) has rank 0, before (a,b)'s 1; then (a,bc) → abc.
  EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{5}));
  // "aaa": (a,a) at 0 and at 1 tie; the leftmost merges, leaving the last a.
  EXPECT_EQ(t.encode("aaa"), (std::vector<int32_t>{6, 0}));
  EXPECT_EQ(t.decode({6, 0}), "aa a");  // no decoder: tokens joined by spaces, as the library does
}

TEST(Tokenizer, ByteFallbackAndUnknownCharacters) {
  const Tokenizer fallback = Tokenizer::load(write_tokenizer(toy({{"model", {{"byte_fallback", true}}}})).string());
  EXPECT_EQ(fallback.encode("aA"), (std::vector<int32_t>{0, 7}));  // 'A' is not in the vocabulary: <0x41>
  const Tokenizer strict = Tokenizer::load(write_tokenizer(toy()).string());
  try {
    strict.encode("aZ");
    FAIL() << "no error for a character with no token and no unk_token";
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no unk_token for \"Z\""), std::string::npos) << e.what();
  }
}

// Hugging Face's own GPT-2 tokenizer.json declares <|endoftext|> with "normalized": true (the npm
// package's copy says false); with no normalizer both match the text as it is (issue 37).
TEST(TokenizerReference, Gpt2AsTheHubWritesIt) {
  const char* cases = std::getenv("ZERO_TOKENIZER_CASES");
  ASSERT_NE(cases, nullptr) << "ZERO_TOKENIZER_CASES must name make_cases.sh's output";
  const fs::path npm = fs::path(cases) / "gpt2";
  json hub = json::parse(read_file(npm / "tokenizer.json"));
  ASSERT_TRUE(hub["normalizer"].is_null());
  for (json& added : hub["added_tokens"]) added["normalized"] = true;
  const Tokenizer as_npm = Tokenizer::load(npm.string()), as_hub = Tokenizer::load(write_tokenizer(hub).string());
  const std::string text = "Hello<|endoftext|> world <|endoftext|><|endoftext|>.";
  EXPECT_EQ(as_hub.encode(text), as_npm.encode(text));
  EXPECT_EQ(as_hub.encode(text), (std::vector<int32_t>{15496, 50256, 995, 220, 50256, 50256, 13}));
}

TEST(Tokenizer, WhatIsNotBuiltIsNamed) {
  const auto error_of = [](const json& doc) {
    try {
      Tokenizer::load(write_tokenizer(doc).string());
    } catch (const zero::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(toy({{"pre_tokenizer", {{"type", "Whitespace"}}}})),
            "tokenizer.json: pre_tokenizer: the pre-tokenizer \"Whitespace\" is not supported by zerocpp's tokenizer");
  EXPECT_EQ(error_of(toy({{"model", {{"type", "Unigram"}}}})),
            "tokenizer.json: model.type: the model \"Unigram\" (BPE is) is not supported by zerocpp's tokenizer");
  EXPECT_NE(error_of(toy({{"added_tokens", {{{"id", 8}, {"content", "<x>"}, {"lstrip", true}, {"special", true}}}}}))
                .find("added_tokens[0] (<x>): lstrip is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(toy({{"model", {{"merges", {"a q"}}}}})).find("merges[0]: \"a\", \"q\" or their merge is not in the vocabulary"),
            std::string::npos);
  try {
    Tokenizer::load("/nonexistent/dir");
    FAIL();
  } catch (const zero::Error& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/dir: no such file");
  }
}

TEST(Tokenizer, IllFormedUtf8BecomesOneReplacementPerMaximalSubpart) {
  EXPECT_EQ(zero::text::valid_utf8("a\xff" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(zero::text::valid_utf8("\xe2\x82 x"), "\xEF\xBF\xBD x");  // a truncated 3-byte sequence: one
  EXPECT_EQ(zero::text::valid_utf8("\xc0\xaf"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // an overlong form: one per byte
  EXPECT_EQ(zero::text::valid_utf8("\xed\xa0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(zero::text::valid_utf8("\xf0\x9f\x99\x82"), "\xf0\x9f\x99\x82");
}
