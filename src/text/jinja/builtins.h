// The chat-template interpreter's built-ins: filters, tests, string and mapping methods, global
// functions and attribute access, each with the reference renderer's behaviour
// (jinja/builtins.cpp, jinja/filters.cpp). They throw EvalError; the evaluator adds the line.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace zero::text::jinja {

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `index`, else the keyword argument `name`, else null.
  const Value* get(size_t index, const char* name) const;
};

// x.name and x[key]: mappings by key (then their methods), lists and strings by index
// (negative from the end) or their `length`; undefined when absent.
Value member(const Value& object, const Value& key);
Value call_function(const std::string& name, const Args& args);  // namespace, range, ...
Value call_method(const Value& self, const std::string& name, const Args& args);
bool apply_test(const std::string& name, const Value& operand);
// `filter` is the Filter node: its name, whether it had parentheses, its argument nodes.
Value apply_filter(const Node& filter, const Value& operand, const Args& args);
Value slice(const Value& object, const Value& start, const Value& stop, const Value& step);

}  // namespace zero::text::jinja
