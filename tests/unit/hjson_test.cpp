// The Hjson reader, rule by rule, against values worked out by hand from the Hjson syntax
// (hjson.github.io/syntax.html). tests/hjson/hjson_diff compares it with hjson-go.
#include "config/hjson.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "zero/error.h"

using nlohmann::json;
using zero::config_detail::parse_hjson;

namespace {

json parse(const std::string& text) { return parse_hjson(text, "t.json"); }

// The one problem of the ConfigError that parsing `text` throws; "" if it is accepted.
std::string problem_of(const std::string& text) {
  try {
    parse_hjson(text, "t.json");
  } catch (const zero::ConfigError& e) {
    EXPECT_EQ(e.origin(), "t.json");
    EXPECT_EQ(e.problems().size(), 1u);
    return e.problems().at(0);
  }
  return "";
}

}  // namespace

TEST(Hjson, PlainJsonReadsAsJson) {
  std::string text = R"({"a": 1, "b": [true, false, null], "c": {"d": "x,}"}, "e": -2.5e-3, "f": ""})";
  EXPECT_EQ(parse(text), json::parse(text));
}

TEST(Hjson, CommentsOfThreeKindsAndTrailingCommas) {
  json j = parse(R"({
    # a hash comment
    // a line comment
    "a": 1, /* a block comment, with a comma, */
    "b": [1, 2, 3,],
    "c": {"d": "x,}",},
  })");
  EXPECT_EQ(j, json::parse(R"({"a": 1, "b": [1, 2, 3], "c": {"d": "x,}"}})"));
}

TEST(Hjson, CommasMayBeLeftOutAtLineEnds) {
  // As DeepSpeed's own monitor documentation writes its example.
  json j = parse("{\n  \"tensorboard\": {\n    \"enabled\": true\n    \"output_path\": \"out/\"\n  }\n  \"x\": [1\n2]\n}");
  EXPECT_EQ(j, json::parse(R"({"tensorboard": {"enabled": true, "output_path": "out/"}, "x": [1, 2]})"));
}

TEST(Hjson, QuotelessKeysAndValues) {
  json j = parse("{\n  stage: 3\n  device: cpu\n  path: /local_nvme/x y  \n  lr: 1e-3 # the rate\n  on: true\n}");
  EXPECT_EQ(j, json::parse(R"({"stage": 3, "device": "cpu", "path": "/local_nvme/x y", "lr": 0.001, "on": true})"));
}

TEST(Hjson, AQuotelessValueIsALiteralOnlyWhenTheWholeOfItIsOne) {
  // The rest of the line is the string, comment markers and commas included.
  json j = parse("{\n  a: hello, world # not a comment\n  b: 1, c: 2\n  d: true love\n  e: 01\n  f: 1e\n  g: -.5\n}");
  EXPECT_EQ(j["a"], "hello, world # not a comment");
  EXPECT_EQ(j["b"], 1);
  EXPECT_EQ(j["c"], 2);
  EXPECT_EQ(j["d"], "true love");
  EXPECT_EQ(j["e"], "01");  // a leading zero is not a number
  EXPECT_EQ(j["f"], "1e");
  EXPECT_EQ(j["g"], "-.5");
}

TEST(Hjson, NumbersWholeBecomeIntegersTheRestDoubles) {
  json j = parse("{\"a\": 500000000, \"b\": 5e8, \"c\": 0.1, \"d\": 18446744073709551615, \"f\": -0,\n\"e\": 1e400\n}");
  EXPECT_TRUE(j["a"].is_number_integer());
  EXPECT_TRUE(j["b"].is_number_float());
  EXPECT_EQ(j["b"].get<double>(), 5e8);
  EXPECT_EQ(j["c"].get<double>(), 0.1);
  EXPECT_TRUE(j["d"].is_number_unsigned());
  EXPECT_EQ(j["e"], "1e400");  // beyond double: Hjson keeps the text as a string (to the line end)
  EXPECT_EQ(j["f"], 0);
}

TEST(Hjson, SingleQuotedAndMultilineStrings) {
  json j = parse("{\n  a: 'it\\'s \"x\"'\n  b:\n    '''\n    first\n      second\n    '''\n  c: ''\n}");
  EXPECT_EQ(j["a"], "it's \"x\"");
  EXPECT_EQ(j["b"], "first\n  second");  // the indentation of ''' is removed, the last line break dropped
  EXPECT_EQ(j["c"], "");
}

TEST(Hjson, EscapesIncludingSurrogatePairs) {
  json j = parse(R"({"a": "\u00e9\n\t\/", "b": "\ud83d\ude00"})");
  EXPECT_EQ(j["a"], "\xC3\xA9\n\t/");
  EXPECT_EQ(j["b"], "\xF0\x9F\x98\x80");
}

TEST(Hjson, TheRootObjectMayGoWithoutBraces) {
  EXPECT_EQ(parse("stage: 2\nfp16: {enabled: true}\n"), json::parse(R"({"stage": 2, "fp16": {"enabled": true}})"));
  EXPECT_EQ(parse("  # only a comment\n"), json::object());
}

TEST(Hjson, AQuotedValueNeedsNoCommaBeforeTheNextKey) {
  EXPECT_EQ(parse(R"({"a": "x" "b": 2})"), json::parse(R"({"a": "x", "b": 2})"));
}

TEST(Hjson, DuplicateKeyIsAnErrorNamingThePathAndLine) {
  EXPECT_EQ(problem_of("{\"zero_optimization\": {\n  \"stage\": 1,\n  \"stage\": 2}}"),
            "invalid Hjson/JSON at line 3, column 3: duplicate key \"stage\" (in zero_optimization.stage)");
  EXPECT_EQ(parse(R"({"a": {"enabled": true}, "b": {"enabled": false}})")["b"]["enabled"], false);
}

TEST(Hjson, SyntaxErrorsGiveLineColumnAndPlace) {
  EXPECT_EQ(problem_of("{\n  \"a\": {\"b\": [1, }\n}"),
            "invalid Hjson/JSON at line 2, column 18: found '}' where a value was expected (in a.b[1])");
  EXPECT_EQ(problem_of("{\"a\": 1"), "invalid Hjson/JSON at line 1, column 1: this '{' is never closed");
  EXPECT_EQ(problem_of("{\"a\": \"x\ny\"}"),
            "invalid Hjson/JSON at line 1, column 9: a quoted string cannot span lines (use ''' for that) (in a)");
  EXPECT_EQ(problem_of("{a b: 1}"),
            "invalid Hjson/JSON at line 1, column 2: a key without quotes cannot hold whitespace (quote it)");
  EXPECT_EQ(problem_of("{\"a\": 1} x"),
            "invalid Hjson/JSON at line 1, column 10: unexpected 'x' after the end of the top-level value");
  EXPECT_EQ(problem_of("{\"a\": \"\\q\"}"), "invalid Hjson/JSON at line 1, column 8: unknown escape \\q (in a)");
}

TEST(Hjson, BytesPythonWouldNotReadAreErrors) {
  EXPECT_EQ(problem_of("{\"a\": \"\xff\"}"), "invalid Hjson/JSON at line 1, column 8: the file is not valid UTF-8");
  EXPECT_EQ(problem_of(std::string("{\"a\": 1}\0", 9)), "invalid Hjson/JSON at line 1, column 9: a NUL byte");
  EXPECT_EQ(problem_of(R"({"a": "\udc00"})"),
            "invalid Hjson/JSON at line 1, column 8: \\u escape of a lone low surrogate (in a)");
  EXPECT_EQ(parse("\xEF\xBB\xBF{\"a\": 1}"), json::parse(R"({"a": 1})"));  // a byte-order mark is skipped
}

TEST(Hjson, ADuplicateKeyInABracelessFileIsReportedAsOne) {
  EXPECT_EQ(problem_of("a: 1, a: 2"), "invalid Hjson/JSON at line 1, column 7: duplicate key \"a\" (in a)");
}

TEST(Hjson, ABackslashAtTheEndOfTheFileIsAnUnclosedString) {
  EXPECT_EQ(problem_of("{\"a\": \"x\\"), "invalid Hjson/JSON at line 1, column 7: this string is never closed (in a)");
}

TEST(Hjson, DeepNestingIsAnErrorNotACrash) {
  std::string deep(100000, '[');
  EXPECT_NE(problem_of(deep).find("nested deeper than 256 levels"), std::string::npos);
}
