#include "config/relaxed_json.h"

#include <gtest/gtest.h>

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

TEST(RelaxedJson, DuplicateKeyNamesThePath) {
  try {
    parse_relaxed_json(R"({"zero_optimization": {"stage": 1, "stage": 2}})", "dup.json");
    FAIL() << "duplicate accepted";
  } catch (const zero::ConfigError& e) {
    EXPECT_EQ(e.origin(), "dup.json");
    ASSERT_EQ(e.problems().size(), 1u);
    EXPECT_EQ(e.problems()[0], "zero_optimization.stage: duplicate key");
  }
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
  try {
    parse_relaxed_json(R"({"optimizer": {"params": {"lr": 3e400}}})", "big.json");
    FAIL() << "3e400 accepted";
  } catch (const zero::ConfigError& e) {
    EXPECT_EQ(e.origin(), "big.json");
    ASSERT_EQ(e.problems().size(), 1u);
    EXPECT_EQ(e.problems()[0], "optimizer.params.lr: number overflow parsing '3e400'");
  }
}
