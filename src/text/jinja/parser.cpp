// The chat-template parser: the reference renderer's grammar (its operator precedence included:
// `is` and `|` bind tighter than `*`, comparisons do not chain). Statements the interpreter does
// not implement are refused here with their name and line. Unknown filters, tests, functions and
// methods are refused when rendering reaches them, as the reference does: Llama 3.1's template
// uses `reject`, which it lacks, on a branch that only `builtin_tools` takes.
#include <algorithm>
#include <utility>

#include "text/jinja/ast.h"
#include "zero/error.h"

namespace zero::text::jinja {

Node::~Node() {
  std::vector<NodePtr> pending;
  const auto take = [&pending](Node& n) {
    for (NodePtr* child : {&n.a, &n.b, &n.c})
      if (*child) pending.push_back(std::move(*child));
    for (Nodes* list : {&n.items, &n.values, &n.body, &n.orelse}) {
      for (NodePtr& child : *list)
        if (child) pending.push_back(std::move(child));
      list->clear();
    }
  };
  take(*this);
  while (!pending.empty()) {
    NodePtr n = std::move(pending.back());
    pending.pop_back();
    take(*n);  // its children move here; it is destroyed childless at the end of the iteration
  }
}

namespace {

// The longest path from a node to a leaf, counted without recursion.
int height(const Node& root) {
  int tallest = 0;
  std::vector<std::pair<const Node*, int>> stack{{&root, 1}};
  while (!stack.empty()) {
    const auto [n, depth] = stack.back();
    stack.pop_back();
    tallest = std::max(tallest, depth);
    if (tallest > kMaxTemplateDepth) return tallest;  // enough to refuse it
    for (const NodePtr* child : {&n->a, &n->b, &n->c})
      if (*child) stack.push_back({child->get(), depth + 1});
    for (const Nodes* list : {&n->items, &n->values, &n->body, &n->orelse})
      for (const NodePtr& child : *list)
        if (child) stack.push_back({child.get(), depth + 1});
  }
  return tallest;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Nodes run() {
    Nodes program;
    while (pos_ < t_.size()) {
      add(program, any());
      // Loops chain operators without recursing ("a+a+a+..."): the tree is measured as built.
      if (!program.empty() && program.back() && height(*program.back()) > kMaxTemplateDepth)
        fail("the template nests or chains more than " + std::to_string(kMaxTemplateDepth) +
                 " levels deep (operators, parentheses, 'not', statements)",
             program.back()->line);
    }
    return program;
  }

 private:
  // The parser's own recursion (nested parentheses, statements, `not`, unary signs) is bounded
  // as it goes: a deeper template is refused before the stack is at risk.
  struct Deeper {
    explicit Deeper(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxTemplateDepth)
        parser.fail("the template nests more than " + std::to_string(kMaxTemplateDepth) + " levels deep");
    }
    ~Deeper() { --parser.depth_; }
    Parser& parser;
  };
  int depth_ = 0;

  // --- tokens
  bool is(Tok type, size_t ahead = 0) const { return pos_ + ahead < t_.size() && t_[pos_ + ahead].type == type; }
  bool is_name(const char* name, size_t ahead = 0) const { return is(Tok::Name, ahead) && t_[pos_ + ahead].value == name; }
  bool is_statement(std::initializer_list<const char*> names) const {
    if (!is(Tok::OpenStatement) || !is(Tok::Name, 1)) return false;
    for (const char* n : names)
      if (t_[pos_ + 1].value == n) return true;
    return false;
  }
  int line() const { return t_.empty() ? 1 : t_[std::min(pos_, t_.size() - 1)].line; }
  [[noreturn]] void fail(const std::string& what, int at = 0) const {
    throw Error("chat template: " + what + " at line " + std::to_string(at ? at : line()));
  }
  const Token& next(const char* expected) {
    if (pos_ >= t_.size()) fail(std::string("the template ends where ") + expected + " was expected");
    return t_[pos_++];
  }
  void expect(Tok type, const char* what) {
    if (!is(type)) {
      if (pos_ >= t_.size()) fail(std::string("the template ends where ") + what + " was expected");
      fail(std::string("expected ") + what + ", found '" + t_[pos_].value + "'");
    }
    ++pos_;
  }
  NodePtr node(NodeKind kind, int at) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = at;
    return n;
  }
  static void add(Nodes& body, NodePtr n) {
    if (n) body.push_back(std::move(n));
  }

  // --- statements
  NodePtr any() {
    const Deeper deeper(*this);
    const Token& tok = t_[pos_];
    switch (tok.type) {
      case Tok::Comment: ++pos_; return nullptr;
      case Tok::Text: {
        auto n = node(NodeKind::Text, tok.line);
        n->name = tok.value;
        ++pos_;
        return n;
      }
      case Tok::OpenExpression: {
        ++pos_;
        auto n = node(NodeKind::Output, tok.line);
        n->a = expression();
        expect(Tok::CloseExpression, "'}}'");
        return n;
      }
      case Tok::OpenStatement: return statement();
      default: fail("unexpected '" + tok.value + "'");
    }
  }

  // Statements until one of `ends` (not consumed); fails at the end of the template.
  Nodes block(std::initializer_list<const char*> ends, const char* opener, int opened_at) {
    Nodes body;
    while (!is_statement(ends)) {
      if (pos_ >= t_.size()) fail(std::string("'{% ") + opener + " %}' is never closed", opened_at);
      add(body, any());
    }
    return body;
  }
  void end_tag(const char* name) {
    expect(Tok::OpenStatement, "'{%'");
    if (!is_name(name)) fail(std::string("expected '{% ") + name + " %}'");
    ++pos_;
    expect(Tok::CloseStatement, "'%}'");
  }

  NodePtr statement() {
    ++pos_;  // {%
    if (!is(Tok::Name)) fail("expected a statement name after '{%'");
    const std::string name = t_[pos_].value;
    const int at = t_[pos_].line;
    ++pos_;
    if (name == "if") {
      auto n = if_statement(at);
      end_tag("endif");
      return n;
    }
    if (name == "for") return for_statement(at);
    if (name == "set") return set_statement(at);
    if (name == "break" || name == "continue") {
      expect(Tok::CloseStatement, "'%}'");
      return node(name == "break" ? NodeKind::Break : NodeKind::Continue, at);
    }
    if (name == "elif" || name == "else" || name.starts_with("end")) fail("unexpected '{% " + name + " %}'", at);
    fail("unsupported statement '" + name + "'", at);
  }

  NodePtr if_statement(int at) {
    auto n = node(NodeKind::If, at);
    n->a = expression();
    expect(Tok::CloseStatement, "'%}'");
    n->body = block({"elif", "else", "endif"}, "if", at);
    if (is_statement({"elif"})) {
      pos_ += 2;
      n->orelse.push_back(if_statement(t_[pos_ - 1].line));
    } else if (is_statement({"else"})) {
      pos_ += 2;
      expect(Tok::CloseStatement, "'%}'");
      n->orelse = block({"endif"}, "if", at);
    }
    return n;
  }

  NodePtr for_statement(int at) {
    auto n = node(NodeKind::For, at);
    n->a = sequence(true);
    if (n->a->kind != NodeKind::Name && n->a->kind != NodeKind::Tuple) fail("a loop variable must be a name or names");
    for (const auto& item : n->a->items)
      if (item->kind != NodeKind::Name) fail("a loop variable must be a name or names");
    if (!is_name("in")) fail("expected 'in' after the loop variable");
    ++pos_;
    n->b = expression();
    if (n->b->kind == NodeKind::Select) {  // `for x in xs if cond`: a loop filter
      n->c = std::move(n->b->b);
      n->b = std::move(n->b->a);
    }
    if (is_name("recursive")) fail("unsupported recursive loop");
    expect(Tok::CloseStatement, "'%}'");
    n->body = block({"endfor", "else"}, "for", at);
    if (is_statement({"else"})) {
      pos_ += 2;
      expect(Tok::CloseStatement, "'%}'");
      n->orelse = block({"endfor"}, "for", at);
    }
    end_tag("endfor");
    return n;
  }

  NodePtr set_statement(int at) {
    auto n = node(NodeKind::Set, at);
    n->a = sequence(false);
    const NodeKind k = n->a->kind;
    bool ok = k == NodeKind::Name || (k == NodeKind::Member && !n->a->flag);
    if (k == NodeKind::Tuple) {
      ok = true;
      for (const auto& item : n->a->items) ok = ok && item->kind == NodeKind::Name;
    }
    if (!ok) fail("cannot assign to this target in '{% set %}'", at);
    if (is(Tok::Equals)) {
      ++pos_;
      n->b = sequence(false);
    } else {
      expect(Tok::CloseStatement, "'%}'");
      n->body = block({"endset"}, "set", at);
      expect(Tok::OpenStatement, "'{%'");
      ++pos_;  // endset
    }
    expect(Tok::CloseStatement, "'%}'");
    return n;
  }

  // --- expressions, loosest first
  NodePtr sequence(bool primary_only) {
    const int at = line();
    NodePtr first = primary_only ? primary() : expression();
    if (!is(Tok::Comma)) return first;
    auto tuple = node(NodeKind::Tuple, at);
    tuple->items.push_back(std::move(first));
    while (is(Tok::Comma)) {
      ++pos_;
      tuple->items.push_back(primary_only ? primary() : expression());
    }
    return tuple;
  }

  NodePtr expression() {
    const Deeper deeper(*this);
    const int at = line();
    NodePtr value = logical("or");
    if (!is_name("if")) return value;
    ++pos_;
    NodePtr condition = logical("or");
    if (is_name("else")) {
      ++pos_;
      auto n = node(NodeKind::Ternary, at);
      n->a = std::move(value);
      n->b = std::move(condition);
      n->c = expression();
      return n;
    }
    auto n = node(NodeKind::Select, at);
    n->a = std::move(value);
    n->b = std::move(condition);
    return n;
  }

  NodePtr logical(const char* op) {
    const bool is_or = std::string(op) == "or";
    NodePtr left = is_or ? logical("and") : negation();
    while (is_name(op)) {
      auto n = node(NodeKind::Binary, t_[pos_++].line);
      n->name = op;
      n->a = std::move(left);
      n->b = is_or ? logical("and") : negation();
      left = std::move(n);
    }
    return left;
  }

  NodePtr negation() {
    if (!is_name("not")) return comparison();
    const Deeper deeper(*this);
    auto n = node(NodeKind::Unary, t_[pos_++].line);
    n->name = "not";
    n->a = negation();
    return n;
  }

  NodePtr comparison() {
    NodePtr left = binary(Tok::Additive);
    while (true) {
      std::string op;
      if (is_name("not") && is_name("in", 1)) {
        op = "not in", pos_ += 2;
      } else if (is_name("in") || is(Tok::Comparison)) {
        op = t_[pos_++].value;
      } else {
        return left;
      }
      auto n = node(NodeKind::Binary, t_[pos_ - 1].line);
      n->name = op;
      n->a = std::move(left);
      n->b = binary(Tok::Additive);
      left = std::move(n);
    }
  }

  // Additive (+ - ~) over multiplicative (* / // %) over power (**) over tests.
  NodePtr binary(Tok level) {
    const auto operand = [&] { return level == Tok::Additive ? binary(Tok::Multiplicative)
                                      : level == Tok::Multiplicative ? binary(Tok::Power) : tests(); };
    NodePtr left = operand();
    while (is(level)) {
      auto n = node(NodeKind::Binary, t_[pos_].line);
      n->name = t_[pos_++].value;
      n->a = std::move(left);
      n->b = operand();
      left = std::move(n);
    }
    return left;
  }

  NodePtr tests() {
    NodePtr operand = filters();
    while (is_name("is")) {
      auto n = node(NodeKind::Test, t_[pos_++].line);
      n->flag = is_name("not");
      if (n->flag) ++pos_;
      if (!is(Tok::Name)) fail("expected a test name after 'is'");
      n->name = t_[pos_++].value;
      if (n->name == "equalto" || n->name == "eq" || n->name == "sameas" || n->name == "divisibleby")
        fail("unsupported test '" + n->name + "' (a test with an argument)", n->line);
      n->a = std::move(operand);
      operand = std::move(n);
    }
    return operand;
  }

  NodePtr filters() {
    NodePtr operand = unary();
    while (is(Tok::Pipe)) {
      ++pos_;
      if (!is(Tok::Name)) fail("expected a filter name after '|'");
      auto n = node(NodeKind::Filter, t_[pos_].line);
      n->name = t_[pos_++].value;
      if (is(Tok::OpenParen)) n->flag = true, arguments(*n);
      n->a = std::move(operand);
      operand = std::move(n);
    }
    return operand;
  }

  NodePtr unary() {
    const Deeper deeper(*this);
    if ((is(Tok::Unary) || is(Tok::Additive)) && (t_[pos_].value == "-" || t_[pos_].value == "+")) {
      auto n = node(NodeKind::Unary, t_[pos_].line);
      n->name = t_[pos_++].value;
      n->a = unary();
      return n;
    }
    NodePtr n = members(primary());
    while (is(Tok::OpenParen)) n = members(call(std::move(n)));
    return n;
  }

  NodePtr call(NodePtr callee) {
    auto n = node(NodeKind::Call, line());
    const bool method = callee->kind == NodeKind::Member && !callee->flag;
    if (callee->kind != NodeKind::Name && !method) fail("unsupported call of something other than a function or a method");
    n->a = std::move(callee);
    arguments(*n);
    return n;
  }

  void arguments(Node& n) {
    expect(Tok::OpenParen, "'('");
    while (!is(Tok::CloseParen)) {
      if (is(Tok::Power) || (is(Tok::Multiplicative) && t_[pos_].value == "*")) fail("unsupported argument unpacking");
      NodePtr arg = expression();
      if (is(Tok::Equals)) {
        ++pos_;
        if (arg->kind != NodeKind::Name) fail("a keyword argument needs a name");
        n.names.push_back(arg->name);
        n.values.push_back(expression());
      } else {
        if (!n.names.empty()) fail("a positional argument follows a keyword argument");
        n.items.push_back(std::move(arg));
      }
      if (is(Tok::Comma)) ++pos_;
      else if (!is(Tok::CloseParen)) expect(Tok::CloseParen, "')'");
    }
    ++pos_;
  }

  NodePtr members(NodePtr object) {
    while (is(Tok::Dot) || is(Tok::OpenBracket)) {
      const bool computed = is(Tok::OpenBracket);
      const int at = t_[pos_++].line;
      auto n = node(NodeKind::Member, at);
      if (!computed) {
        const Token& key = next("a name after '.'");
        if (key.type == Tok::Name) {
          n->name = key.value;
        } else if (key.type == Tok::Number && key.value.find('.') == std::string::npos) {
          n->flag = true;  // x.0 is x[0]
          n->b = node(NodeKind::Literal, at);
          n->b->value = Value::integer(std::stod(key.value));
        } else {
          fail("expected a name after '.'");
        }
        n->a = std::move(object);
        object = std::move(n);
        continue;
      }
      Nodes parts;
      bool slice = false;
      while (!is(Tok::CloseBracket)) {
        if (pos_ >= t_.size()) fail("'[' is never closed", at);
        if (is(Tok::Colon)) {
          parts.push_back(nullptr), ++pos_, slice = true;
          continue;
        }
        parts.push_back(expression());
        if (is(Tok::Colon)) ++pos_, slice = true;
      }
      ++pos_;
      if (parts.empty()) fail("empty '[]'", at);
      if (slice) {
        if (parts.size() > 3) fail("a slice takes at most three parts", at);
        n->kind = NodeKind::Slice;
        parts.resize(3);
        n->items = std::move(parts);
      } else {
        n->flag = true;
        n->b = std::move(parts[0]);
      }
      n->a = std::move(object);
      object = std::move(n);
    }
    return object;
  }

  NodePtr primary() {
    const Token& tok = next("an expression");
    switch (tok.type) {
      case Tok::Number: {
        auto n = node(NodeKind::Literal, tok.line);
        const double v = std::stod(tok.value);
        n->value = tok.value.find('.') != std::string::npos ? Value::floating(v) : Value::integer(v);
        return n;
      }
      case Tok::String: {
        auto n = node(NodeKind::Literal, tok.line);
        std::string s = tok.value;
        while (is(Tok::String)) s += t_[pos_++].value;  // 'a' 'b' is 'ab'
        n->value = Value::string(std::move(s));
        return n;
      }
      case Tok::Name: {
        auto n = node(NodeKind::Name, tok.line);
        n->name = tok.value;
        return n;
      }
      case Tok::OpenParen: {
        NodePtr inner = sequence(false);
        expect(Tok::CloseParen, "')'");
        return inner;
      }
      case Tok::OpenBracket: {
        auto n = node(NodeKind::List, tok.line);
        while (!is(Tok::CloseBracket)) {
          n->items.push_back(expression());
          if (is(Tok::Comma)) ++pos_;
          else if (!is(Tok::CloseBracket)) expect(Tok::CloseBracket, "']'");
        }
        ++pos_;
        return n;
      }
      case Tok::OpenBrace: {
        auto n = node(NodeKind::Dict, tok.line);
        while (!is(Tok::CloseBrace)) {
          n->items.push_back(expression());
          expect(Tok::Colon, "':'");
          n->values.push_back(expression());
          if (is(Tok::Comma)) ++pos_;
          else if (!is(Tok::CloseBrace)) expect(Tok::CloseBrace, "'}'");
        }
        ++pos_;
        return n;
      }
      default: fail("unexpected '" + tok.value + "'", tok.line);
    }
  }

  const std::vector<Token>& t_;
  size_t pos_ = 0;
};

}  // namespace

Nodes parse(const std::vector<Token>& tokens) { return Parser(tokens).run(); }

}  // namespace zero::text::jinja
