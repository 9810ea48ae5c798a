// The chat-template interpreter: statements write to one output string, expressions evaluate to
// Values. Scopes follow the reference (and Jinja): a for loop has its own scope, which `set`
// inside it writes to and which ends with the loop; `if` has none; a namespace's attributes are
// the way to carry a value out of a loop.
#include "text/jinja/eval.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "text/jinja/builtins.h"
#include "zero/error.h"

namespace zero::text::jinja {
namespace {

struct Scope {
  Scope* parent = nullptr;
  std::unordered_map<std::string, Value> vars;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent)
      if (auto it = s->vars.find(name); it != s->vars.end()) return &it->second;
    return nullptr;
  }
};

enum class Flow { Normal, Break, Continue };

// A template from elsewhere is a program: it may loop without end (nested loops over range) or
// double a string until memory is gone. Rendering stops with an error naming the budget:
// statements and expressions evaluated, bytes written, bytes in one string, items in one list.
// Every real template of tests/reference/chat_templates renders 1024 messages (the most a
// zero-finetune record holds) within it (ChatTemplateLimits, tested).
constexpr int64_t kMaxSteps = 20'000'000;
constexpr size_t kMaxOutputBytes = size_t{32} << 20;
constexpr size_t kMaxStringBytes = size_t{16} << 20;
constexpr size_t kMaxListItems = size_t{1} << 18;
// A loop's iteration costs more than a step (the loop variable, `loop`'s nine attributes).
constexpr int64_t kStepsPerIteration = 8;

void check_size(const Value& v) {
  if (v.kind == Kind::String && v.text.size() > kMaxStringBytes)
    fail("a string longer than " + std::to_string(kMaxStringBytes) + " bytes (the template's budget)");
  if (v.kind == Kind::Array && v.array->size() > kMaxListItems)
    fail("a list of more than " + std::to_string(kMaxListItems) + " items (the template's budget)");
}

Value binary_numbers(const std::string& op, const Value& l, const Value& r) {
  const double a = l.number, b = r.number;
  const bool floating = l.kind == Kind::Float || r.kind == Kind::Float;
  const auto number = [&](double v) { return floating ? Value::floating(v) : Value::integer(v); };
  if (op == "+") return number(a + b);
  if (op == "-") return number(a - b);
  if (op == "*") return number(a * b);
  if (op == "/") return Value::floating(a / b);  // JavaScript: 1/0 is Infinity, not an error
  if (op == "//") return number(std::floor(a / b));
  if (op == "%") return number(std::fmod(a, b));  // JavaScript's %: the sign of the dividend
  if (op == "<") return Value::of(a < b);
  if (op == ">") return Value::of(a > b);
  if (op == "<=") return Value::of(a <= b);
  if (op == ">=") return Value::of(a >= b);
  return {};
}

Value power(const Value& l, const Value& r) {
  const auto num = [](const Value& v) { return v.kind == Kind::Bool ? (v.boolean ? 1.0 : 0.0) : v.number; };
  const double a = num(l), b = num(r);
  if (a == 0 && b < 0) fail("0.0 cannot be raised to a negative power");
  const double result = std::pow(a, b);
  if (!std::isfinite(result)) fail("exponentiation result is not a finite number");
  return l.kind == Kind::Float || r.kind == Kind::Float || b < 0 ? Value::floating(result) : Value::integer(result);
}

// The reference's binary operators, in its order of checks (see docs/chat_templates.md).
// Two strings joined, refused before the join when the result would pass the budget.
Value concatenated(const std::string& a, const std::string& b) {
  if (a.size() + b.size() > kMaxStringBytes)
    fail("a string longer than " + std::to_string(kMaxStringBytes) + " bytes (the template's budget)");
  return Value::string(a + b);
}

Value binary(const std::string& op, const Value& l, const Value& r) {
  if (op == "==") return Value::of(loose_equals(l, r));
  if (op == "!=") return Value::of(!loose_equals(l, r));
  const bool membership = op == "in" || op == "not in";
  if (l.kind == Kind::Undefined || r.kind == Kind::Undefined) {
    if (r.kind == Kind::Undefined && membership) return Value::of(op == "not in");
    fail("cannot apply '" + op + "' to an undefined value");
  }
  if (l.kind == Kind::Null || r.kind == Kind::Null) fail("cannot apply '" + op + "' to none");
  if (op == "~") return concatenated(js_string(l), js_string(r));
  const auto numeric = [](const Value& v) { return v.is_number() || v.kind == Kind::Bool; };
  if (op == "**" && numeric(l) && numeric(r)) return power(l, r);
  if (l.is_number() && r.is_number()) {
    if (Value v = binary_numbers(op, l, r); v.kind != Kind::Undefined) return v;
  } else if (l.kind == Kind::Array && r.kind == Kind::Array) {
    if (op == "+") {
      if (l.array->size() + r.array->size() > kMaxListItems)
        fail("a list of more than " + std::to_string(kMaxListItems) + " items (the template's budget)");
      Array joined = *l.array;
      joined.insert(joined.end(), r.array->begin(), r.array->end());
      return Value::list(std::move(joined));
    }
  } else if (r.kind == Kind::Array && membership) {
    bool found = false;
    for (const Value& item : *r.array) found = found || strict_equals(item, l);
    return Value::of(found == (op == "in"));
  }
  if ((l.kind == Kind::String || r.kind == Kind::String) && op == "+") return concatenated(js_string(l), js_string(r));
  if (l.kind == Kind::String && r.kind == Kind::String && membership)
    return Value::of((r.text.find(l.text) != std::string::npos) == (op == "in"));
  if (l.kind == Kind::String && r.kind == Kind::Object && membership)
    return Value::of((r.object->find(l.text) != nullptr) == (op == "in"));
  fail("unsupported operation " + std::string(kind_name(l.kind)) + " " + op + " " + kind_name(r.kind));
}

class Interpreter {
 public:
  // Records into `spans` where each message (by its object, whatever list it is reached
  // through: messages, messages[1:], a filtered list) is written into `out`, the final output.
  void trace(MessageSpans* spans, const Value& messages, const std::string* out) {
    spans_ = spans;
    traced_out_ = out;
    traced_messages_ = messages;  // held, so that no other object takes a message's address
    spans->spans.clear();
    spans->ambiguous = false;
    if (messages.kind != Kind::Array) return;
    spans->spans.assign(messages.array->size(), {MessageSpans::kUnset, MessageSpans::kUnset});
    for (size_t i = 0; i < messages.array->size(); ++i)
      if ((*messages.array)[i].kind == Kind::Object) message_index_[(*messages.array)[i].object.get()] = i;
  }

  Flow exec(const Nodes& body, Scope& scope, std::string& out) {
    for (const auto& n : body)
      if (Flow f = exec(*n, scope, out); f != Flow::Normal) return f;
    return Flow::Normal;
  }

  Value eval(const Node& n, Scope& scope) {
    try {
      step();
      Value v = evaluate(n, scope);
      check_size(v);
      return v;
    } catch (const EvalError& e) {
      throw Error("chat template: " + e.message + " at line " + std::to_string(n.line));
    }
  }

 private:
  void step(int64_t cost = 1) {
    if ((steps_ += cost) > kMaxSteps)
      fail("rendering took more than " + std::to_string(kMaxSteps) +
           " steps (the template's budget: a loop without end?)");
  }
  int64_t steps_ = 0;
  MessageSpans* spans_ = nullptr;
  const std::string* traced_out_ = nullptr;
  Value traced_messages_;
  std::unordered_map<const Object*, size_t> message_index_;

  // Output from `mark` on was taken back (an iteration left by break or continue): a span
  // recorded in it no longer describes the text.
  void note_taken_back(size_t mark) {
    if (furthest_end_ > mark) spans_->ambiguous = true;
  }
  size_t furthest_end_ = 0;  // of the spans recorded

  void note_written(const Value& item, size_t begin, size_t end) {
    if (item.kind != Kind::Object) return;
    const auto found = message_index_.find(item.object.get());
    if (found == message_index_.end()) return;
    auto& span = spans_->spans[found->second];
    // An iteration that wrote nothing (a loop that only checks the messages) does not count.
    if (span.first != MessageSpans::kUnset && span.second > span.first) {
      if (end > begin) spans_->ambiguous = true;
      return;
    }
    span = {begin, end};
    furthest_end_ = std::max(furthest_end_, end);
  }

  Flow exec(const Node& n, Scope& scope, std::string& out) {
    try {
      step();
      const Flow f = execute(n, scope, out);
      if (out.size() > kMaxOutputBytes)
        fail("the output passed " + std::to_string(kMaxOutputBytes) + " bytes (the template's budget)");
      return f;
    } catch (const EvalError& e) {
      throw Error("chat template: " + e.message + " at line " + std::to_string(n.line));
    }
  }

  Flow execute(const Node& n, Scope& scope, std::string& out) {
    switch (n.kind) {
      case NodeKind::Text:
        out += n.name;
        return Flow::Normal;
      case NodeKind::Output:
        out += to_output(eval(*n.a, scope));
        return Flow::Normal;
      case NodeKind::If:
        return exec(truthy(eval(*n.a, scope)) ? n.body : n.orelse, scope, out);
      case NodeKind::For:
        loop(n, scope, out);
        return Flow::Normal;
      case NodeKind::Set:
        assign(n, scope);
        return Flow::Normal;
      case NodeKind::Break:
        return Flow::Break;
      case NodeKind::Continue:
        return Flow::Continue;
      default:
        fail("an expression where a statement was expected");
    }
  }

  static void bind(const Node& target, const Value& v, Scope& scope) {
    if (target.kind == NodeKind::Name) return void(scope.vars[target.name] = v);
    if (v.kind != Kind::Array) fail(std::string("cannot unpack a ") + kind_name(v.kind));
    if (v.array->size() != target.items.size())
      fail(std::string("too ") + (v.array->size() < target.items.size() ? "few" : "many") + " values to unpack");
    for (size_t i = 0; i < target.items.size(); ++i) scope.vars[target.items[i]->name] = (*v.array)[i];
  }

  void assign(const Node& n, Scope& scope) {
    Value v;
    if (n.b) {
      v = eval(*n.b, scope);
    } else {
      std::string text;
      if (exec(n.body, scope, text) != Flow::Normal) fail("'break' or 'continue' inside '{% set %}'");
      v = Value::string(std::move(text));
    }
    if (n.a->kind != NodeKind::Member) return bind(*n.a, v, scope);
    const Value object = eval(*n.a->a, scope);
    if (object.kind != Kind::Namespace)
      fail("cannot set an attribute of a " + std::string(kind_name(object.kind)) + " (only of a namespace)");
    object.object->set(n.a->name, std::move(v));
  }

  // Note: as in the reference, an iteration left by break or continue writes nothing, and the
  // else block runs when no iteration ran to its end.
  void loop(const Node& n, Scope& outer, std::string& out) {
    Scope scope{&outer, {}};
    Value iterable = eval(*n.b, scope);
    Array items;
    if (iterable.kind == Kind::Object) {
      for (const auto& entry : iterable.object->entries) items.push_back(Value::string(entry.first));
    } else if (iterable.kind == Kind::Array) {
      items = *iterable.array;
    } else {
      fail(std::string("cannot loop over a ") + kind_name(iterable.kind));
    }
    if (n.c) {  // `for x in xs if cond`: the condition sees the loop variable but not `loop`
      Array kept;
      for (const Value& item : items) {
        Scope test{&scope, {}};
        bind(*n.a, item, test);
        if (truthy(eval(*n.c, test))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    bool ran = false;
    const double length = static_cast<double>(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      step(kStepsPerIteration);
      const double index = static_cast<double>(i);
      Object info;
      info.entries = {{"index", Value::integer(index + 1)},
                      {"index0", Value::integer(index)},
                      {"revindex", Value::integer(length - index)},
                      {"revindex0", Value::integer(length - index - 1)},
                      {"first", Value::of(i == 0)},
                      {"last", Value::of(i + 1 == items.size())},
                      {"length", Value::integer(length)},
                      {"previtem", i > 0 ? items[i - 1] : Value{}},
                      {"nextitem", i + 1 < items.size() ? items[i + 1] : Value{}}};
      scope.vars["loop"] = Value::mapping(std::move(info));
      bind(*n.a, items[i], scope);
      const size_t mark = out.size();
      const Flow f = exec(n.body, scope, out);
      if (f != Flow::Normal) {
        out.resize(mark);
        if (spans_ && &out == traced_out_) note_taken_back(mark);
      }
      if (f == Flow::Normal && spans_ && &out == traced_out_) note_written(items[i], mark, out.size());
      if (f == Flow::Break) break;
      if (f == Flow::Continue) continue;
      ran = true;
    }
    if (!ran && exec(n.orelse, scope, out) != Flow::Normal) fail("'break' or 'continue' outside a loop");
  }

  Args arguments(const Node& n, Scope& scope) {
    Args args;
    for (const auto& item : n.items) args.positional.push_back(eval(*item, scope));
    for (size_t i = 0; i < n.names.size(); ++i) {
      for (const auto& [k, v] : args.keyword)
        if (k == n.names[i]) fail("keyword argument '" + k + "' given twice");
      args.keyword.emplace_back(n.names[i], eval(*n.values[i], scope));
    }
    return args;
  }

  Value evaluate(const Node& n, Scope& scope) {
    switch (n.kind) {
      case NodeKind::Literal:
        return n.value;
      case NodeKind::Name: {
        const Value* v = scope.find(n.name);
        return v ? *v : Value{};
      }
      case NodeKind::Member: {
        const Value object = eval(*n.a, scope);
        return member(object, n.flag ? eval(*n.b, scope) : Value::string(n.name));
      }
      case NodeKind::Slice: {
        const Value object = eval(*n.a, scope);
        const auto bound = [&](size_t i) { return n.items[i] ? eval(*n.items[i], scope) : Value{}; };
        return slice(object, bound(0), bound(1), bound(2));
      }
      case NodeKind::Call: {
        const Args args = arguments(n, scope);
        const Node& callee = *n.a;
        Value fn;
        if (callee.kind == NodeKind::Member) {  // a method: name it if the object has none such
          const Value object = eval(*callee.a, scope);
          fn = member(object, Value::string(callee.name));
          if (fn.kind != Kind::Function && (object.kind == Kind::String || object.kind == Kind::Object))
            fail("unsupported method '" + callee.name + "' of a " + kind_name(object.kind));
        } else {
          fn = eval(callee, scope);
          if (fn.kind == Kind::Undefined) fail("unsupported function '" + callee.name + "'");
        }
        if (fn.kind != Kind::Function) fail("cannot call '" + callee.name + "', a " + kind_name(fn.kind));
        if (fn.function->self.kind == Kind::Undefined) return call_function(fn.function->name, args);
        return call_method(fn.function->self, fn.function->name, args);
      }
      case NodeKind::Filter: {
        const Value operand = eval(*n.a, scope);
        return apply_filter(n, operand, arguments(n, scope));
      }
      case NodeKind::Test:
        return Value::of(apply_test(n.name, eval(*n.a, scope)) != n.flag);
      case NodeKind::Unary: {
        const Value v = eval(*n.a, scope);
        if (n.name == "not") return Value::of(!truthy(v));
        if (!v.is_number() && v.kind != Kind::Bool)
          fail("cannot apply unary '" + n.name + "' to a " + kind_name(v.kind));
        const double x = (n.name == "-" ? -1 : 1) * (v.kind == Kind::Bool ? (v.boolean ? 1.0 : 0.0) : v.number);
        return v.kind == Kind::Float ? Value::floating(x) : Value::integer(x);
      }
      case NodeKind::Binary: {
        const Value left = eval(*n.a, scope);
        if (n.name == "and") return truthy(left) ? eval(*n.b, scope) : left;
        if (n.name == "or") return truthy(left) ? left : eval(*n.b, scope);
        return binary(n.name, left, eval(*n.b, scope));
      }
      case NodeKind::Ternary:
        return truthy(eval(*n.b, scope)) ? eval(*n.a, scope) : eval(*n.c, scope);
      case NodeKind::Select:
        return truthy(eval(*n.b, scope)) ? eval(*n.a, scope) : Value{};
      case NodeKind::List:
      case NodeKind::Tuple: {
        Array items;
        for (const auto& item : n.items) items.push_back(eval(*item, scope));
        Value list = Value::list(std::move(items));
        list.tuple = n.kind == NodeKind::Tuple;
        return list;
      }
      case NodeKind::Dict: {
        Object entries;
        for (size_t i = 0; i < n.items.size(); ++i) {
          const Value key = eval(*n.items[i], scope);
          if (key.kind != Kind::String)
            fail(std::string("a mapping's key must be a string, not a ") + kind_name(key.kind));
          entries.set(key.text, eval(*n.values[i], scope));
        }
        return Value::mapping(std::move(entries));
      }
      default:
        fail("a statement where an expression was expected");
    }
  }
};

}  // namespace

std::string render(const Nodes& program, const nlohmann::ordered_json& context, MessageSpans* spans) {
  Scope root;
  for (const char* f : {"namespace", "raise_exception", "range", "strftime_now"}) root.vars[f] = Value::builtin(f);
  root.vars["true"] = root.vars["True"] = Value::of(true);
  root.vars["false"] = root.vars["False"] = Value::of(false);
  root.vars["none"] = root.vars["None"] = Value::null();
  if (!context.is_null() && !context.is_object()) throw Error("chat template: the context must be a JSON object");
  if (context.is_object()) {
    for (const auto& [key, value] : context.items()) {
      if (root.vars.count(key)) throw Error("chat template: the context's '" + key + "' would replace a built-in", key);
      root.vars[key] = from_json(value);
    }
  }
  std::string out;
  Interpreter interpreter;
  if (spans) {
    const auto messages = root.vars.find("messages");
    interpreter.trace(spans, messages == root.vars.end() ? Value{} : messages->second, &out);
  }
  if (interpreter.exec(program, root, out) != Flow::Normal)
    throw Error("chat template: 'break' or 'continue' outside a loop");
  return out;
}

}  // namespace zero::text::jinja
