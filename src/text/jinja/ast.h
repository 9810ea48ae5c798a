// The syntax tree of a chat template: one node type whose fields each kind uses as listed below.
// The parser (jinja/parser.cpp) refuses what the interpreter does not implement, naming it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/jinja/lexer.h"
#include "text/jinja/value.h"

namespace zero::text::jinja {

enum class NodeKind {
  // Statements.
  Text,      // name: the text
  Output,    // a: the expression of {{ ... }}
  If,        // a: test; body; orelse (an elif is an If alone in orelse)
  For,       // a: target (Name or Tuple); b: iterable; c: the `if` filter or null; body; orelse
  Set,       // a: target (Name, Tuple or Member); b: value, or null for a block set (body)
  Break,
  Continue,
  // Expressions.
  Literal,   // value
  Name,      // name
  Member,    // a: object; b: key (flag: computed, `x[k]`) or null with name (`x.name`)
  Slice,     // a: object; items: start, stop, step (each may be null)
  Call,      // a: callee; items: positional arguments; names + values: keyword arguments
  Filter,    // a: operand; name; flag: with parentheses; items, names + values: its arguments
  Test,      // a: operand; name; flag: negated (`is not`)
  Unary,     // name: "not", "-" or "+"; a: operand
  Binary,    // name: the operator ("and", "in", "not in", "+", ...); a, b
  Ternary,   // a: value if true; b: condition; c: value if false
  Select,    // a: value; b: condition (`a if b` without else: undefined when false)
  List,      // items
  Tuple,     // items
  Dict,      // items: keys; values
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Nodes = std::vector<NodePtr>;

// A template from elsewhere may nest or chain without end ("((((...", "a+a+a+...", "not not ...").
// The parser refuses more than this many levels in any path from a statement to a leaf, so that
// rendering (which recurses once per level) stays within the stack.
inline constexpr int kMaxTemplateDepth = 256;

struct Node {
  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Iterative: destroying a chain of 100 000 nodes must not recurse 100 000 deep.
  ~Node();
  NodeKind kind;
  int line = 0;
  std::string name;
  Value value;
  bool flag = false;
  NodePtr a, b, c;
  Nodes items;
  std::vector<std::string> names;
  Nodes values;
  Nodes body, orelse;
};

// The statements of a template. Errors are zero::Error naming the construct and its line.
Nodes parse(const std::vector<Token>& tokens);

}  // namespace zero::text::jinja
