// Attribute access, methods, tests, slices and global functions of the chat-template interpreter,
// as the reference renderer (@huggingface/jinja) defines them. Where it differs from Python's
// Jinja we follow it (docs/chat_templates.md lists the differences): `s.strip('x')` ignores its
// argument, `none.attr` is undefined rather than an error, a mapping is not `iterable`.
#include "text/jinja/builtins.h"

#include <chrono>
#include <cmath>
#include <ctime>

#include "text/chat_template.h"
#include "text/jinja/js.h"

namespace zero::text::jinja {
namespace {

const std::string& text_arg(const Args& args, size_t i, const char* method) {
  if (i >= args.positional.size() || args.positional[i].kind != Kind::String)
    fail(std::string(method) + "() takes a string argument");
  return args.positional[i].text;
}

bool starts_or_ends(const Value& self, const Args& args, bool start, const char* method) {
  if (args.positional.empty()) fail(std::string(method) + "() requires at least one argument");
  const auto test = [&](const std::string& p) {
    return start ? self.text.starts_with(p) : self.text.ends_with(p);
  };
  const Value& pattern = args.positional[0];
  if (pattern.kind == Kind::String) return test(pattern.text);
  if (pattern.kind != Kind::Array) fail(std::string(method) + "() argument must be a string or tuple of strings");
  for (const Value& p : *pattern.array) {
    if (p.kind != Kind::String) fail(std::string(method) + "() tuple elements must be strings");
    if (test(p.text)) return true;
  }
  return false;
}

Value split(const std::string& s, const Args& args) {
  const Value sep = args.positional.empty() ? Value::null() : args.positional[0];
  const Value maxsplit = args.positional.size() > 1 ? args.positional[1] : Value::integer(-1);
  if (sep.kind != Kind::String && sep.kind != Kind::Null) fail("split() separator must be a string or none");
  if (maxsplit.kind != Kind::Int) fail("split() maxsplit must be an integer");
  const long max = static_cast<long>(maxsplit.number);
  std::vector<std::string> parts;
  if (sep.kind == Kind::Null) {  // runs of whitespace; the rest after maxsplit parts kept whole
    const std::string text = js_trim(s, true, false);
    size_t i = 0;
    while (i < text.size()) {
      const size_t begin = i;
      while (i < text.size() && !js_space_at(text, i)) ++i;
      if (max != -1 && static_cast<long>(parts.size()) >= max) {
        parts.push_back(text.substr(begin));
        break;
      }
      parts.push_back(text.substr(begin, i - begin));
      while (size_t n = js_space_at(text, i)) i += n;
    }
  } else {
    if (sep.text.empty()) fail("split() separator is empty");
    size_t from = 0, at = 0;
    while ((max == -1 || static_cast<long>(parts.size()) < max) && (at = s.find(sep.text, from)) != std::string::npos) {
      parts.push_back(s.substr(from, at - from));
      from = at + sep.text.size();
    }
    parts.push_back(s.substr(from));
  }
  Array out;
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

// str.replace(old, new[, count]): count none or negative replaces all. An empty `old` inserts
// `new` between code points and at both ends (as Python and the reference do).
Value replace(const std::string& s, const Args& args) {
  if (args.positional.size() < 2) fail("replace() requires at least two arguments");
  const std::string& from = text_arg(args, 0, "replace");
  const std::string& to = text_arg(args, 1, "replace");
  const Value* count = args.get(2, "count");
  if (count && count->kind != Kind::Int && count->kind != Kind::Null) fail("replace() count must be an integer or none");
  double remaining = count && count->kind == Kind::Int && count->number >= 0 ? count->number : INFINITY;
  std::string out;
  if (from.empty()) {
    std::u32string cps = code_points(s);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (remaining > 0) out += to, --remaining;
      if (i < cps.size()) out += utf8(std::u32string(1, cps[i]));
    }
    return Value::string(out);
  }
  size_t pos = 0, at = 0;
  while (remaining > 0 && (at = s.find(from, pos)) != std::string::npos) {
    out += s.substr(pos, at - pos) + to;
    pos = at + from.size();
    --remaining;
  }
  return Value::string(out + s.substr(pos));
}

Value pairs(const Object& o) {
  Array items;
  for (const auto& [k, v] : o.entries) items.push_back(Value::list({Value::string(k), v}));
  return Value::list(std::move(items));
}

bool is_string_method(const std::string& name) {
  for (const char* m : {"upper", "lower", "strip", "title", "capitalize", "rstrip", "lstrip", "startswith",
                        "endswith", "split", "replace"})
    if (name == m) return true;
  return false;
}

std::string strftime_now(const std::string& format) {
  static const char* kShort[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  static const char* kLong[] = {"January", "February", "March", "April", "May", "June", "July",
                                "August", "September", "October", "November", "December"};
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  const auto pad = [](int n) { return (n < 10 ? "0" : "") + std::to_string(n); };
  // Note: the reference knows these directives only and leaves any other as written.
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    const char d = i + 1 < format.size() && format[i] == '%' ? format[i + 1] : 0;
    std::string part;
    switch (d) {
      case 'Y': part = std::to_string(tm.tm_year + 1900); break;
      case 'm': part = pad(tm.tm_mon + 1); break;
      case 'd': part = pad(tm.tm_mday); break;
      case 'b': part = kShort[tm.tm_mon]; break;
      case 'B': part = kLong[tm.tm_mon]; break;
      case 'H': part = pad(tm.tm_hour); break;
      case 'M': part = pad(tm.tm_min); break;
      case '%': part = "%"; break;
      default: out += format[i]; continue;
    }
    out += part;
    ++i;
  }
  return out;
}

Value range(const Args& args) {
  if (!args.keyword.empty()) fail("range() takes no keyword arguments");
  for (const Value& a : args.positional)
    if (!a.is_number()) fail(std::string("range() takes numbers, not a ") + kind_name(a.kind));
  if (args.positional.empty() || args.positional.size() > 3) fail("range() takes one to three numbers");
  double start = 0, stop = args.positional[0].number, step = 1;
  if (args.positional.size() > 1) start = stop, stop = args.positional[1].number;
  if (args.positional.size() > 2) step = args.positional[2].number;
  if (step == 0) fail("range() step must not be zero");
  // Counted before anything is built: range(10**12) is refused at once, not after gigabytes.
  constexpr double kMaxItems = 1 << 18;  // the interpreter's budget for one list
  if ((stop - start) / step > kMaxItems) fail("range() of more than 262144 items (the template's budget)");
  Array out;
  for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
    out.push_back(std::trunc(i) == i ? Value::integer(i) : Value::floating(i));
  }
  return Value::list(std::move(out));
}

Value make_namespace(const Args& args) {
  if (args.positional.size() > 1) fail("namespace() takes at most one positional argument");
  Object entries;
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.kind == Kind::Object) {
      entries = *source.object;
    } else if (source.kind == Kind::Array) {
      for (const Value& pair : *source.array) {
        if (pair.kind != Kind::Array || pair.array->size() != 2 || (*pair.array)[0].kind != Kind::String)
          fail("namespace() expects a mapping or a list of [name, value] pairs");
        entries.set((*pair.array)[0].text, (*pair.array)[1]);
      }
    } else {
      fail(std::string("namespace() cannot take a ") + kind_name(source.kind));
    }
  }
  for (const auto& [k, v] : args.keyword) entries.set(k, v);
  return Value::mapping(std::move(entries), Kind::Namespace);
}

}  // namespace

const Value* Args::get(size_t index, const char* name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

Value member(const Value& object, const Value& key) {
  if (object.is_mapping()) {
    if (key.kind != Kind::String) fail(std::string("a mapping's key must be a string, not a ") + kind_name(key.kind));
    if (const Value* v = object.object->find(key.text)) return *v;
    if (object.kind == Kind::Object)
      for (const char* m : {"get", "items", "keys", "values"})
        if (key.text == m) return Value::builtin(m, object);
    return {};
  }
  if (object.kind == Kind::Array || object.kind == Kind::String) {
    if (key.kind == Kind::Int) {
      const long n = static_cast<long>(key.number);
      if (object.kind == Kind::String) {
        bool found = false;
        std::string unit = utf16_unit_at(object.text, n, found);
        return found ? Value::string(std::move(unit)) : Value{};
      }
      const long size = static_cast<long>(object.array->size());
      const long i = n < 0 ? n + size : n;
      return i >= 0 && i < size ? (*object.array)[i] : Value{};
    }
    if (key.kind != Kind::String) fail(std::string("cannot index a ") + kind_name(object.kind) + " with a " + kind_name(key.kind));
    if (key.text == "length")
      return Value::integer(static_cast<double>(object.kind == Kind::String ? utf16_length(object.text) : object.array->size()));
    if (object.kind == Kind::String && is_string_method(key.text)) return Value::builtin(key.text, object);
    return {};
  }
  if (key.kind != Kind::String) fail(std::string("cannot index a ") + kind_name(object.kind) + " with a " + kind_name(key.kind));
  return {};  // undefined.x and none.x are undefined in the reference
}

Value call_method(const Value& self, const std::string& name, const Args& args) {
  if (self.kind == Kind::String) {
    if (!args.keyword.empty() && name != "replace") fail(name + "() takes no keyword arguments");
    const std::string& s = self.text;
    if (name == "upper") return Value::string(js_upper(s));
    if (name == "lower") return Value::string(js_lower(s));
    if (name == "strip") return Value::string(js_trim(s));
    if (name == "lstrip") return Value::string(js_trim(s, true, false));
    if (name == "rstrip") return Value::string(js_trim(s, false, true));
    if (name == "title") return Value::string(js_title(s));
    if (name == "capitalize") {  // the first UTF-16 unit upper-cased: an astral character stays
      const std::u32string cps = code_points(s);
      if (cps.empty() || cps[0] >= 0x10000) return self;
      const std::string first = utf8(cps.substr(0, 1));
      return Value::string(js_upper(first) + s.substr(first.size()));
    }
    if (name == "startswith" || name == "endswith") return Value::of(starts_or_ends(self, args, name == "startswith", name.c_str()));
    if (name == "split") return split(s, args);
    if (name == "replace") return replace(s, args);
  } else if (self.kind == Kind::Object) {
    if (name == "items") return pairs(*self.object);
    Array out;
    if (name == "keys" || name == "values") {
      for (const auto& [k, v] : self.object->entries) out.push_back(name == "keys" ? Value::string(k) : v);
      return Value::list(std::move(out));
    }
    if (name == "get") {
      if (args.positional.empty() || args.positional[0].kind != Kind::String) fail("get() takes a string key");
      if (const Value* v = self.object->find(args.positional[0].text)) return *v;
      return args.positional.size() > 1 ? args.positional[1] : Value::null();
    }
  }
  fail(std::string("unsupported method '") + name + "' of a " + kind_name(self.kind));
}

Value call_function(const std::string& name, const Args& args) {
  if (name == "namespace") return make_namespace(args);
  if (name == "range") return range(args);
  if (name == "raise_exception")
    throw ChatTemplateRaise(args.positional.empty() ? std::string() : js_string(args.positional[0]));
  if (name == "strftime_now") {
    if (args.positional.empty() || args.positional[0].kind != Kind::String) fail("strftime_now() takes a format string");
    return Value::string(strftime_now(args.positional[0].text));
  }
  fail("unsupported function '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v) {
  const Kind k = v.kind;
  if (name == "defined") return k != Kind::Undefined;
  if (name == "undefined") return k == Kind::Undefined;
  if (name == "none") return k == Kind::Null;
  if (name == "boolean") return k == Kind::Bool;
  if (name == "true" || name == "false") return k == Kind::Bool && v.boolean == (name == "true");
  if (name == "string") return k == Kind::String;
  if (name == "number") return v.is_number();
  if (name == "integer") return k == Kind::Int;
  if (name == "callable") return k == Kind::Function;
  if (name == "iterable") return (k == Kind::Array && !v.tuple) || k == Kind::String;  // no mapping, in the reference
  if (name == "mapping") return k == Kind::Object;
  if (name == "sequence") return k == Kind::Array || k == Kind::Object || k == Kind::String;
  if (name == "lower") return k == Kind::String && v.text == js_lower(v.text);
  if (name == "upper") return k == Kind::String && v.text == js_upper(v.text);
  if (name == "odd" || name == "even") {
    if (k != Kind::Int) fail("test '" + name + "' needs an integer, not a " + kind_name(k));
    return (std::fmod(v.number, 2) != 0) == (name == "odd");
  }
  fail("unsupported test '" + name + "'");
}

Value slice(const Value& object, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (object.kind != Kind::Array && object.kind != Kind::String) fail(std::string("cannot slice a ") + kind_name(object.kind));
  for (const Value* v : {&start_v, &stop_v, &step_v})
    if (v->kind != Kind::Int && v->kind != Kind::Undefined) fail("slice bounds must be integers");
  const std::u32string cps = object.kind == Kind::String ? code_points(object.text) : std::u32string();
  const long len = static_cast<long>(object.kind == Kind::String ? cps.size() : object.array->size());
  const long step = step_v.kind == Kind::Int ? static_cast<long>(step_v.number) : 1;
  const bool has_start = start_v.kind == Kind::Int, has_stop = stop_v.kind == Kind::Int;
  long start = static_cast<long>(start_v.number), stop = static_cast<long>(stop_v.number);
  // Note: the reference's clamping; a negative step's stop of -1 means "before the first".
  if (step >= 0) {
    start = !has_start ? 0 : start < 0 ? std::max(len + start, 0L) : std::min(start, len);
    stop = !has_stop ? len : stop < 0 ? std::max(len + stop, 0L) : std::min(stop, len);
  } else {
    start = !has_start ? len - 1 : start < 0 ? std::max(len + start, -1L) : std::min(start, len - 1);
    stop = !has_stop ? -1 : stop < -1 ? std::max(len + stop, -1L) : std::min(stop, len - 1);
  }
  const long direction = step > 0 ? 1 : step < 0 ? -1 : 0;
  Array items;
  std::u32string chars;
  for (long i = start; direction * i < direction * stop; i += step) {
    if (object.kind == Kind::String) chars += cps[i];
    else items.push_back((*object.array)[i]);
  }
  return object.kind == Kind::String ? Value::string(utf8(chars)) : Value::list(std::move(items));
}

}  // namespace zero::text::jinja
