// Chat-template filters, as the reference renderer applies them: which filters exist depends on
// the operand's type and on whether the filter was written with parentheses (`x|tojson` and
// `x|tojson(indent=4)` take different paths there, `x|length()` is an error), and we keep that.
#include <algorithm>
#include <cmath>
#include <set>

#include "text/jinja/builtins.h"
#include "text/jinja/js.h"

namespace zero::text::jinja {
namespace {

[[noreturn]] void not_for(const std::string& filter, const Value& operand) {
  fail("filter '" + filter + "' does not apply to a " + kind_name(operand.kind));
}

// JavaScript's Array.prototype.join over the elements' values (none and undefined join as "").
std::string join(const Array& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    const Value& v = items[i];
    out += (i ? separator : "") + (v.kind == Kind::Null || v.kind == Kind::Undefined ? std::string() : js_string(v));
  }
  return out;
}

std::u16string utf16(std::string_view s) {
  std::u16string out;
  for (char32_t c : code_points(s)) {
    if (c < 0x10000) {
      out += static_cast<char16_t>(c);
    } else {
      out += static_cast<char16_t>(0xD800 + ((c - 0x10000) >> 10));
      out += static_cast<char16_t>(0xDC00 + ((c - 0x10000) & 0x3FF));
    }
  }
  return out;
}

// The reference's ordering for `sort`: numbers (and booleans) by value, strings by UTF-16 code
// units, lower-cased unless case-sensitive; anything else cannot be compared.
int compare(const Value& a, const Value& b, bool case_sensitive) {
  const auto numeric = [](const Value& v) { return v.is_number() || v.kind == Kind::Bool; };
  const auto number = [](const Value& v) { return v.kind == Kind::Bool ? (v.boolean ? 1.0 : 0.0) : v.number; };
  if ((a.kind == Kind::Null && b.kind == Kind::Null) || (a.kind == Kind::Undefined && b.kind == Kind::Undefined)) return 0;
  if (numeric(a) && numeric(b)) return number(a) < number(b) ? -1 : number(a) > number(b) ? 1 : 0;
  if (a.kind != Kind::String || b.kind != Kind::String)
    fail(std::string("cannot compare a ") + kind_name(a.kind) + " with a " + kind_name(b.kind));
  const std::u16string x = utf16(case_sensitive ? a.text : js_lower(a.text));
  const std::u16string y = utf16(case_sensitive ? b.text : js_lower(b.text));
  return x < y ? -1 : x > y ? 1 : 0;
}

// An attribute path "a.b.0" into mappings and lists; undefined where it leads nowhere.
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t from = 0;
  while (true) {
    const size_t dot = path.find('.', from);
    const std::string part = path.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
    if (v.is_mapping()) {
      const Value* found = v.object->find(part);
      v = found ? *found : Value{};
    } else if (v.kind == Kind::Array) {
      double index = 0;
      if (!js_parse_int(part, index) || index < 0 || index >= static_cast<double>(v.array->size())) return {};
      v = (*v.array)[static_cast<size_t>(index)];
    } else {
      return {};
    }
    if (dot == std::string::npos) return v;
    from = dot + 1;
  }
}

const Value& flag_arg(const Args& args, size_t i, const char* name, const Value& fallback) {
  const Value* v = args.get(i, name);
  if (v && v->kind != Kind::Bool) fail(std::string(name) + " must be a boolean");
  return v ? *v : fallback;
}

Value sort(const Array& items, const Args& args) {
  const Value no = Value::of(false);
  const bool reverse = flag_arg(args, 0, "reverse", no).boolean;
  const bool case_sensitive = flag_arg(args, 1, "case_sensitive", no).boolean;
  const Value* attribute = args.get(2, "attribute");
  if (attribute && attribute->kind != Kind::String && attribute->kind != Kind::Int && attribute->kind != Kind::Null)
    fail("sort's attribute must be a string or an integer");
  const bool by_attribute = attribute && attribute->kind != Kind::Null;
  const std::string path = by_attribute ? js_string(*attribute) : "";
  Array sorted = items;
  std::stable_sort(sorted.begin(), sorted.end(), [&](const Value& a, const Value& b) {
    const int c = by_attribute ? compare(attribute_path(a, path), attribute_path(b, path), case_sensitive)
                               : compare(a, b, case_sensitive);
    return reverse ? c > 0 : c < 0;
  });
  return Value::list(std::move(sorted));
}

// selectattr("attr"[, "test"[, "value"]]) and rejectattr: the arguments must be string literals.
Value select_attribute(const Node& filter, const Array& items, const Args& args, bool select) {
  for (const Value& item : items)
    if (!item.is_mapping()) fail("filter '" + filter.name + "' applies to a list of mappings only");
  if (!filter.names.empty() || args.positional.empty()) fail("filter '" + filter.name + "' takes string arguments");
  for (const auto& arg : filter.items)
    if (arg->kind != NodeKind::Literal || arg->value.kind != Kind::String)
      fail("filter '" + filter.name + "' takes string literals as arguments");
  const std::string& attr = args.positional[0].text;
  const std::string test = args.positional.size() > 1 ? args.positional[1].text : "";
  Array out;
  for (const Value& item : items) {
    const Value* a = item.object->find(attr);
    bool result = false;
    if (a && test.empty()) {
      result = truthy(*a);
    } else if (a && (test == "equalto" || test == "eq")) {
      if (args.positional.size() < 3) fail("test '" + test + "' needs a value to compare with");
      result = strict_equals(*a, args.positional[2]);
    } else if (a) {
      result = apply_test(test, *a);
    }
    if (result == select) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value indent(const std::string& text, int width, bool first, bool blank) {
  std::string out, line;
  size_t from = 0, index = 0;
  while (true) {
    const size_t nl = text.find('\n', from);
    line = text.substr(from, nl == std::string::npos ? std::string::npos : nl - from);
    const bool keep = (!first && index == 0) || (!blank && line.empty());
    out += (index ? "\n" : "") + (keep ? line : std::string(width, ' ') + line);
    if (nl == std::string::npos) return Value::string(out);
    from = nl + 1, ++index;
  }
}

Value tojson(const Value& operand, const Args& args) {
  JsonOptions options;
  for (const auto& [key, v] : args.keyword) {
    if (key == "indent") {
      if (v.kind != Kind::Int && v.kind != Kind::Null) fail("tojson's indent must be an integer");
      if (v.kind == Kind::Int && v.number > 64) fail("tojson's indent must be at most 64");
      options.indent = v.kind == Kind::Int && v.number > 0 ? static_cast<int>(v.number) : 0;
    } else if (key == "ensure_ascii") {
      if (v.kind != Kind::Bool) fail("tojson's ensure_ascii must be a boolean");
      options.ensure_ascii = v.boolean;
    } else if (key == "separators") {
      if (v.kind == Kind::Null) continue;
      if (v.kind != Kind::Array || v.array->size() != 2 || (*v.array)[0].kind != Kind::String ||
          (*v.array)[1].kind != Kind::String)
        fail("tojson's separators must be two strings");
      options.has_separators = true;
      options.item_separator = (*v.array)[0].text;
      options.key_separator = (*v.array)[1].text;
    } else if (key == "sort_keys") {
      // Note: the reference sorts keys by locale (localeCompare), which we do not reproduce.
      if (v.kind != Kind::Bool) fail("tojson's sort_keys must be a boolean");
      if (v.boolean) fail("unsupported tojson(sort_keys=true)");
    }
  }
  return Value::string(to_json(operand, options));
}

Value number_from_text(const std::string& name, const std::string& text, const Value* fallback) {
  double v = 0;
  const bool ok = name == "int" ? js_parse_int(text, v) : js_parse_float(text, v);
  if (!ok) return fallback ? *fallback : name == "int" ? Value::integer(0) : Value::floating(0);
  return name == "int" ? Value::integer(v) : Value::floating(v);
}

Value plain_filter(const std::string& name, const Value& v) {
  switch (v.kind) {
    case Kind::Array: {
      const Array& a = *v.array;
      if (name == "list") return v;
      if (name == "first" || name == "last") {
        if (a.empty()) fail("filter '" + name + "' of an empty list");
        return name == "first" ? a.front() : a.back();
      }
      if (name == "length") return Value::integer(static_cast<double>(a.size()));
      if (name == "reverse") return Value::list(Array(a.rbegin(), a.rend()));
      if (name == "sort") return sort(a, {});
      if (name == "join") return Value::string(join(a, ""));
      if (name == "string") return Value::string(to_json(v, {}, 0, false));
      if (name == "unique") {
        Array out;
        for (const Value& item : a) {
          const bool nan = item.is_number() && std::isnan(item.number);
          const bool seen = std::any_of(out.begin(), out.end(), [&](const Value& o) {
            return strict_equals(o, item) || (nan && o.is_number() && std::isnan(o.number));
          });
          if (!seen) out.push_back(item);
        }
        return Value::list(std::move(out));
      }
      break;
    }
    case Kind::String:
      if (name == "length") return Value::integer(static_cast<double>(utf16_length(v.text)));
      if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") return call_method(v, name, {});
      if (name == "trim") return Value::string(js_trim(v.text));
      if (name == "indent") return indent(v.text, 4, false, false);
      if (name == "join" || name == "string") return v;
      if (name == "int" || name == "float") return number_from_text(name, v.text, nullptr);
      break;
    case Kind::Int:
    case Kind::Float:
      if (name == "abs") return v.kind == Kind::Int ? Value::integer(std::fabs(v.number)) : Value::floating(std::fabs(v.number));
      if (name == "int") return Value::integer(std::floor(v.number));
      if (name == "float") return Value::floating(v.number);
      if (name == "string") return Value::string(to_output(v));
      break;
    case Kind::Object:
      if (name == "length") return Value::integer(static_cast<double>(v.object->entries.size()));
      if (name == "items" || name == "keys" || name == "values") return call_method(v, name, {});
      break;
    case Kind::Bool:
      if (name == "bool") return v;
      if (name == "int") return Value::integer(v.boolean ? 1 : 0);
      if (name == "float") return Value::floating(v.boolean ? 1 : 0);
      if (name == "string") return Value::string(v.boolean ? "true" : "false");
      break;
    default: break;
  }
  not_for(name, v);
}

}  // namespace

Value apply_filter(const Node& filter, const Value& operand, const Args& args) {
  static const std::set<std::string> kFilters = {
      "abs", "bool", "capitalize", "default", "first", "float", "indent", "int", "items", "join", "keys", "last",
      "length", "list", "lower", "map", "rejectattr", "replace", "reverse", "safe", "selectattr", "sort", "string",
      "title", "tojson", "trim", "unique", "upper", "values"};
  const std::string& name = filter.name;
  if (!kFilters.count(name)) fail("unsupported filter '" + name + "'");
  if (name == "safe") return operand;
  if (name == "tojson") return filter.flag ? tojson(operand, args) : Value::string(to_json(operand));
  if (!filter.flag) return plain_filter(name, operand);
  if (name == "join") {
    Array items;
    if (operand.kind == Kind::String) {
      for (char32_t c : code_points(operand.text)) items.push_back(Value::string(utf8(std::u32string(1, c))));
    } else if (operand.kind == Kind::Array) {
      items = *operand.array;
    } else {
      not_for(name, operand);
    }
    const Value* sep = args.get(0, "separator");
    if (sep && sep->kind != Kind::String) fail("join's separator must be a string");
    return Value::string(join(items, sep ? sep->text : ""));
  }
  if (name == "int" || name == "float") {
    const Value* fallback = args.get(0, "default");
    if (operand.kind == Kind::String) return number_from_text(name, operand.text, fallback);
    if (operand.is_number()) return operand;
    if (operand.kind == Kind::Bool) return plain_filter(name, operand);
    not_for(name, operand);
  }
  if (name == "default") {
    const Value fallback = args.positional.empty() ? Value::string("") : args.positional[0];
    const Value* boolean = args.get(1, "boolean");
    if (boolean && boolean->kind != Kind::Bool) fail("default's boolean flag must be a boolean");
    const bool use_falsy = boolean && boolean->boolean;
    return operand.kind == Kind::Undefined || (use_falsy && !truthy(operand)) ? fallback : operand;
  }
  if (operand.kind == Kind::Array) {
    if (name == "sort") return sort(*operand.array, args);
    if (name == "selectattr" || name == "rejectattr") return select_attribute(filter, *operand.array, args, name == "selectattr");
    if (name == "map") {
      const Value* attr = nullptr;
      const Value* fallback = nullptr;
      for (const auto& [k, v] : args.keyword) {
        if (k == "attribute") attr = &v;
        if (k == "default") fallback = &v;
      }
      if (!attr) fail("filter 'map' without attribute= is not supported");
      if (attr->kind != Kind::String) fail("map's attribute must be a string");
      Array out;
      for (const Value& item : *operand.array) {
        if (!item.is_mapping()) fail("filter 'map' applies to a list of mappings only");
        Value v = attribute_path(item, attr->text);
        out.push_back(v.kind == Kind::Undefined && fallback ? *fallback : v);
      }
      return Value::list(std::move(out));
    }
  } else if (operand.kind == Kind::String) {
    if (name == "indent") {
      const Value* width = args.get(0, "width");
      if (width && width->kind != Kind::Int) fail("indent's width must be an integer");
      if (width && std::fabs(width->number) > 1024) fail("indent's width must be at most 1024");
      const Value* first = args.get(1, "first");
      const Value* blank = args.get(2, "blank");
      return indent(operand.text, width ? static_cast<int>(width->number) : 4, first && truthy(*first), blank && truthy(*blank));
    }
    if (name == "replace") return call_method(operand, "replace", args);
  } else if (operand.kind == Kind::Object && (name == "items" || name == "keys" || name == "values")) {
    return call_method(operand, name, args);
  }
  not_for(name, operand);
}

}  // namespace zero::text::jinja
