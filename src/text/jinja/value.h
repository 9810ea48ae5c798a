// Values of the chat-template interpreter (src/text/chat_template.h), held as the reference
// renderer, Hugging Face's @huggingface/jinja, holds them: JavaScript's view of JSON data.
//
// Note: numbers are JavaScript numbers (doubles) tagged integer or float, because the reference
// renders 1.0 from the data as "1" and 1.0 from the template as "1.0", and compares both as
// numbers. Lists and mappings are shared, because `==` between them compares identity in the
// reference (Nemo's `message == user_messages[-1]` is true for the same message object only).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace zero::text::jinja {

// A rendering error; the interpreter adds the template line.
struct EvalError {
  std::string message;
};
[[noreturn]] inline void fail(std::string message) { throw EvalError{std::move(message)}; }

enum class Kind { Undefined, Null, Bool, Int, Float, String, Array, Object, Namespace, Function };

struct Value;
struct Object;
struct Function;
using Array = std::vector<Value>;

struct Value {
  Kind kind = Kind::Undefined;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::shared_ptr<const Array> array;       // Array
  std::shared_ptr<Object> object;           // Object and Namespace (a namespace's attributes change)
  std::shared_ptr<const Function> function; // Function
  bool tuple = false;  // an Array written `(a, b)`: the reference cannot print it or test it iterable

  static Value null();
  static Value of(bool b);
  static Value integer(double n);
  static Value floating(double n);
  static Value string(std::string s);
  static Value list(Array items);
  static Value mapping(Object entries, Kind kind = Kind::Object);
  static Value builtin(std::string name);  // a global function
  static Value builtin(std::string name, Value self);  // a method bound to `self`

  bool is_number() const { return kind == Kind::Int || kind == Kind::Float; }
  bool is_mapping() const { return kind == Kind::Object || kind == Kind::Namespace; }
};

// A mapping in insertion order (chat data is small: a linear search beats hashing here).
struct Object {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

// A built-in function: a global (raise_exception, range, ...) or a method bound to `self`.
struct Function {
  std::string name;
  Value self;
};

// JSON data as JavaScript's JSON.parse and the reference see it: integral numbers are integers,
// and keys that are array indices ("0", "7") come first in numeric order (JavaScript objects
// order them so; the rest keep their order).
Value from_json(const nlohmann::ordered_json& data);

const char* kind_name(Kind kind);  // for messages: "string", "list", ...
bool truthy(const Value& v);
// What `{{ v }}` prints (a list or mapping prints as JSON); undefined and none print nothing.
std::string to_output(const Value& v);
// JavaScript's String(v.value): what `+` and `~` join ("1" for the float 1.0, "true" for true).
std::string js_string(const Value& v);
// JavaScript's `==` on the underlying values (1 == "1", none == undefined, lists by identity).
bool loose_equals(const Value& a, const Value& b);
// JavaScript's `===` (`in` on lists, `unique`, the `equalto` test).
bool strict_equals(const Value& a, const Value& b);

struct JsonOptions {
  int indent = 0;              // 0: on one line
  bool ensure_ascii = false;
  std::string item_separator;  // empty: ", " (or "," when indenting)
  std::string key_separator;   // empty: ": "
  bool has_separators = false;
};
// The reference's tojson; `undefined_as_null` false prints undefined as `undefined` (as output does).
std::string to_json(const Value& v, const JsonOptions& options = {}, int depth = 0, bool undefined_as_null = true);

}  // namespace zero::text::jinja
