#include "config/relaxed_json.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "zero/error.h"

using zero::config_detail::blank_trailing_commas;
using zero::config_detail::parse_relaxed_json;

TEST(RelaxedJson, CommentsAndTrailingCommas) {
  auto j = parse_relaxed_json(R"({
    // a line comment
    "a": 1, /* a block comment, with a comma, */
    "b": [1, 2, 3,],
    "c": {"d": "x,}",},
  })",
                              "t.json");
  EXPECT_EQ(j["a"], 1);
  EXPECT_EQ(j["b"].size(), 3u);
  EXPECT_EQ(j["c"]["d"], "x,}");  // commas inside strings are data
}

TEST(RelaxedJson, BlankingKeepsOffsets) {
  std::string text = R"({"a": [1,], "s": "q\",]"})";
  std::string out = blank_trailing_commas(text);
  EXPECT_EQ(out.size(), text.size());
  EXPECT_EQ(out, R"({"a": [1 ], "s": "q\",]"})");
}

namespace {

// The problems of the ConfigError that parsing `text` (from "t.json") throws; none if accepted.
std::vector<std::string> problems_of(const std::string& text) {
  try {
    parse_relaxed_json(text, "t.json");
  } catch (const zero::ConfigError& e) {
    EXPECT_EQ(e.origin(), "t.json");
    return e.problems();
  }
  return {};
}

}  // namespace

TEST(RelaxedJson, DuplicateKeyNamesThePath) {
  EXPECT_EQ(problems_of(R"({"zero_optimization": {"stage": 1, "stage": 2}})"),
            std::vector<std::string>{"zero_optimization.stage: duplicate key"});
}

TEST(RelaxedJson, SameKeyInSiblingObjectsIsFine) {
  auto j = parse_relaxed_json(R"({"a": {"enabled": true}, "b": {"enabled": false}})", "t.json");
  EXPECT_EQ(j["b"]["enabled"], false);
}

TEST(RelaxedJson, SyntaxErrorGivesLineAndColumn) {
  try {
    parse_relaxed_json("{\n  \"a\": 1\n  \"b\": 2\n}", "bad.json");
    FAIL();
  } catch (const zero::ConfigError& e) {
    EXPECT_NE(e.problems()[0].find("line 3"), std::string::npos) << e.problems()[0];
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos);
  }
}

TEST(RelaxedJson, ANumberBeyondDoubleNamesItsKey) {
  // Found by the config fuzzer: nlohmann throws out_of_range (not parse_error) here.
  EXPECT_EQ(problems_of(R"({"optimizer": {"params": {"lr": 3e400}}})"),
            std::vector<std::string>{"optimizer.params.lr: number overflow parsing '3e400'"});
}
