// Chat-template values: conversion from JSON, truthiness, printing, equality and tojson, each as
// the reference renderer (@huggingface/jinja, on JavaScript values) does it.
#include "text/jinja/value.h"

#include <algorithm>
#include <cmath>

#include "text/jinja/js.h"
#include "text/tokenizer.h"
#include "zero/error.h"

namespace zero::text::jinja {
namespace {

// Keys JavaScript objects put first, in numeric order: canonical array indices below 2^32 - 1.
bool is_array_index(const std::string& key, double& index) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0')) return false;
  if (!std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  index = std::stod(key);
  return index < 4294967295.0;
}

namespace {

// Printing a value walks into its items: a namespace or a list that contains itself would never
// end. Past this many levels the value is refused.
constexpr int kMaxValueDepth = 128;
thread_local int g_printing_depth = 0;

struct PrintingDeeper {
  PrintingDeeper() {
    if (++g_printing_depth > kMaxValueDepth) {
      --g_printing_depth;
      throw EvalError{"a value nested more than " + std::to_string(kMaxValueDepth) +
                      " levels deep (a namespace or list that contains itself?)"};
    }
  }
  ~PrintingDeeper() { --g_printing_depth; }
  PrintingDeeper(const PrintingDeeper&) = delete;
  PrintingDeeper& operator=(const PrintingDeeper&) = delete;
};

}  // namespace

// RuntimeValue.toString in the reference: what printing and joining use. Note: the reference's
// none holds JavaScript's undefined, not null, so it joins as "undefined" and === undefined.
std::string runtime_string(const Value& v) {
  const PrintingDeeper deeper;
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::Null: return "undefined";
    case Kind::Bool: return v.boolean ? "true" : "false";
    case Kind::Int: return js_number(v.number);
    case Kind::Float:
      if (v.number == 0 && std::signbit(v.number)) return "-0.0";
      if (std::isfinite(v.number) && std::fmod(v.number, 1.0) == 0 && std::fabs(v.number) < 1e21)
        return js_number(v.number) + ".0";  // toFixed(1)
      return js_number(v.number);
    case Kind::String: return v.text;
    case Kind::Array:
    case Kind::Object:
    case Kind::Namespace: return to_json(v, {}, 0, false);
    case Kind::Function: break;
  }
  throw EvalError{"cannot print the function '" + v.function->name + "'"};
}

enum class JsType { Undefined, Bool, Number, String, Object };  // none is undefined there

JsType js_type(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::Null: return JsType::Undefined;
    case Kind::Bool: return JsType::Bool;
    case Kind::Int:
    case Kind::Float: return JsType::Number;
    case Kind::String: return JsType::String;
    default: return JsType::Object;
  }
}

const void* identity(const Value& v) {
  if (v.kind == Kind::Array) return v.array.get();
  if (v.kind == Kind::Function) return v.function.get();
  return v.object.get();
}

bool same_type_equals(const Value& a, const Value& b, JsType type) {
  switch (type) {
    case JsType::Undefined: return true;
    case JsType::Bool: return a.boolean == b.boolean;
    case JsType::Number: return a.number == b.number;
    case JsType::String: return a.text == b.text;
    case JsType::Object: return identity(a) == identity(b);
  }
  return false;
}

// ToPrimitive of a list (Array.prototype.toString), a mapping (a JavaScript Map) or a function.
std::string to_primitive(const Value& v) {
  const PrintingDeeper deeper;
  if (v.kind != Kind::Array) return v.kind == Kind::Function ? "function" : "[object Map]";
  std::string out;
  for (size_t i = 0; i < v.array->size(); ++i) out += (i ? "," : "") + runtime_string((*v.array)[i]);
  return out;
}

std::string json_string(const std::string& s, bool ensure_ascii) {
  std::string quoted = json_quote(s);
  if (!ensure_ascii) return quoted;
  // Note: the reference escapes each UTF-16 unit from U+007F up, DEL included (Python does not).
  std::string out;
  for (char32_t c : code_points(quoted)) {
    char buf[16];
    if (c < 0x7F) {
      out += static_cast<char>(c);
    } else if (c < 0x10000) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      const unsigned u = static_cast<unsigned>(c) - 0x10000;
      std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF));
      out += buf;
    }
  }
  return out;
}

}  // namespace

namespace {
Value of_kind(Kind kind) {
  Value v;
  v.kind = kind;
  return v;
}
}  // namespace

Value Value::null() { return of_kind(Kind::Null); }

Value Value::of(bool b) {
  Value v = of_kind(Kind::Bool);
  v.boolean = b;
  return v;
}

Value Value::integer(double n) {
  Value v = of_kind(Kind::Int);
  v.number = n;
  return v;
}

Value Value::floating(double n) {
  Value v = of_kind(Kind::Float);
  v.number = n;
  return v;
}

Value Value::string(std::string s) {
  Value v = of_kind(Kind::String);
  v.text = std::move(s);
  return v;
}

Value Value::list(Array items) {
  Value v = of_kind(Kind::Array);
  v.array = std::make_shared<const Array>(std::move(items));
  return v;
}

Value Value::mapping(Object entries, Kind kind) {
  Value v = of_kind(kind);
  v.object = std::make_shared<Object>(std::move(entries));
  return v;
}

Value Value::builtin(std::string name) { return builtin(std::move(name), Value{}); }

Value Value::builtin(std::string name, Value self) {
  Value v = of_kind(Kind::Function);
  v.function = std::make_shared<const Function>(Function{std::move(name), std::move(self)});
  return v;
}

const Value* Object::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

void Object::set(const std::string& key, Value value) {
  for (auto& [k, v] : entries)
    if (k == key) return void(v = std::move(value));
  entries.emplace_back(key, std::move(value));
}

Value from_json(const nlohmann::ordered_json& data) {
  switch (data.type()) {
    case nlohmann::json::value_t::null: return Value::null();
    case nlohmann::json::value_t::boolean: return Value::of(data.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(static_cast<double>(data.get<int64_t>()));
    case nlohmann::json::value_t::number_unsigned: return Value::integer(static_cast<double>(data.get<uint64_t>()));
    case nlohmann::json::value_t::number_float: {
      const double d = data.get<double>();
      return std::isfinite(d) && std::trunc(d) == d ? Value::integer(d) : Value::floating(d);
    }
    case nlohmann::json::value_t::string: return Value::string(valid_utf8(data.get_ref<const std::string&>()));
    case nlohmann::json::value_t::array: {
      Array items;
      for (const auto& item : data) items.push_back(from_json(item));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<double, std::string>> indices;
      Object rest;
      for (const auto& [key, value] : data.items()) {
        double index = 0;
        if (is_array_index(key, index)) indices.emplace_back(index, key);
        rest.entries.emplace_back(key, from_json(value));
      }
      if (indices.empty()) return Value::mapping(std::move(rest));
      std::sort(indices.begin(), indices.end());
      Object ordered;
      for (const auto& [index, key] : indices) ordered.entries.emplace_back(key, *rest.find(key));
      for (auto& entry : rest.entries) {
        double index = 0;
        if (!is_array_index(entry.first, index)) ordered.entries.push_back(std::move(entry));
      }
      return Value::mapping(std::move(ordered));
    }
    default: throw Error("chat template: the context holds a JSON value that is not data (binary)");
  }
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Undefined: return "undefined";
    case Kind::Null: return "none";
    case Kind::Bool: return "boolean";
    case Kind::Int: return "integer";
    case Kind::Float: return "float";
    case Kind::String: return "string";
    case Kind::Array: return "list";
    case Kind::Object: return "mapping";
    case Kind::Namespace: return "namespace";
    case Kind::Function: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::Undefined:
    case Kind::Null: return false;
    case Kind::Bool: return v.boolean;
    case Kind::Int:
    case Kind::Float: return v.number != 0 && !std::isnan(v.number);
    case Kind::String: return !v.text.empty();
    case Kind::Array: return !v.array->empty();
    case Kind::Object: return !v.object->entries.empty();
    case Kind::Namespace:
    case Kind::Function: return true;
  }
  return false;
}

std::string to_output(const Value& v) {
  return v.kind == Kind::Undefined || v.kind == Kind::Null ? std::string() : runtime_string(v);
}

std::string js_string(const Value& v) {
  switch (v.kind) {
    case Kind::Int:
    case Kind::Float: return js_number(v.number);
    case Kind::Array:
    case Kind::Object:
    case Kind::Namespace:
    case Kind::Function: return to_primitive(v);
    default: return runtime_string(v);
  }
}

bool loose_equals(const Value& a, const Value& b) {
  const JsType ta = js_type(a), tb = js_type(b);
  if (ta == tb) return same_type_equals(a, b, ta);
  if (ta == JsType::Undefined || tb == JsType::Undefined) return false;
  if (ta == JsType::Number && tb == JsType::String) return a.number == js_to_number(b.text);
  if (ta == JsType::String && tb == JsType::Number) return js_to_number(a.text) == b.number;
  if (ta == JsType::Bool) return loose_equals(Value::integer(a.boolean ? 1 : 0), b);
  if (tb == JsType::Bool) return loose_equals(a, Value::integer(b.boolean ? 1 : 0));
  if (ta == JsType::Object) return loose_equals(Value::string(to_primitive(a)), b);
  return loose_equals(a, Value::string(to_primitive(b)));
}

bool strict_equals(const Value& a, const Value& b) {
  const JsType ta = js_type(a);
  return ta == js_type(b) && same_type_equals(a, b, ta);
}

std::string to_json(const Value& v, const JsonOptions& options, int depth, bool undefined_as_null) {
  const PrintingDeeper deeper;
  const std::string item_sep = options.has_separators ? options.item_separator : options.indent ? "," : ", ";
  const std::string key_sep = options.has_separators ? options.key_separator : ": ";
  switch (v.kind) {
    case Kind::Null: return "null";
    case Kind::Undefined: return undefined_as_null ? "null" : "undefined";
    case Kind::Bool: return v.boolean ? "true" : "false";
    case Kind::Int:
    case Kind::Float: return std::isfinite(v.number) ? js_number(v.number) : "null";
    case Kind::String: return json_string(v.text, options.ensure_ascii);
    case Kind::Function: throw EvalError{"cannot convert the function '" + v.function->name + "' to JSON"};
    default: break;
  }
  if (v.tuple) throw EvalError{"cannot print a tuple or convert it to JSON (the reference cannot)"};
  const std::string unit(options.indent, ' ');
  std::string base = "\n";
  for (int i = 0; i < depth; ++i) base += unit;
  const std::string child = base + unit;
  std::vector<std::string> parts;
  if (v.kind == Kind::Array) {
    for (const Value& item : *v.array) parts.push_back(to_json(item, options, depth + 1, undefined_as_null));
  } else {
    for (const auto& [key, value] : v.object->entries)
      parts.push_back((options.indent ? child : "") + json_string(key, options.ensure_ascii) + key_sep +
                      to_json(value, options, depth + 1, undefined_as_null));
  }
  const bool array = v.kind == Kind::Array;
  std::string out = array ? "[" : "{";
  if (options.indent && !parts.empty() && array) {
    out += child;
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? item_sep + child : "") + parts[i];
    return out + base + "]";
  }
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? item_sep : "") + parts[i];
  if (options.indent && !parts.empty()) out += base;
  return out + (array ? "]" : "}");
}

}  // namespace zero::text::jinja
