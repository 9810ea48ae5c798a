#include "hjson_oracle.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "config/hjson.h"
#include "zero/error.h"

namespace zero::hjson_oracle {
namespace {

using nlohmann::json;

struct Outcome {
  bool accepted = false;
  json value;
  std::string error;
};

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Outcome run_hjson_go(const std::string& path) {
  std::string command = "hjson-cli -j " + shell_quote(path) + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run hjson-cli");
  std::string output;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  int status = pclose(pipe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 127) {
    throw std::runtime_error("hjson-cli is missing (scripts/bootstrap installs Debian's hjson-go)");
  }
  Outcome o;
  if (WEXITSTATUS(status) != 0) {
    o.error = output.substr(0, output.find('\n'));
    return o;
  }
  try {
    o.value = json::parse(output);
    o.accepted = true;
  } catch (const json::exception& e) {
    o.error = std::string("hjson-cli printed what is not JSON: ") + e.what();
  }
  return o;
}

// Equal as documents: numbers by value (hjson-go prints every number as a float64).
bool same(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  if (a.type() != b.type()) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto other = b.find(it.key());
      if (other == b.end() || !same(*it, *other)) return false;
    }
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!same(a[i], b[i])) return false;
    }
    return true;
  }
  return a == b;
}

// Where zerocpp rejects on purpose what hjson-go reads (src/config/hjson.h).
const char* deliberate_rejection(const std::string& error) {
  static const char* kReasons[] = {"duplicate key",       "not valid UTF-8",  "a NUL byte",
                                   "surrogate",           "nested deeper",    "the file ends where a value was expected"};
  for (const char* reason : kReasons) {
    if (error.find(reason) != std::string::npos) return reason;
  }
  return nullptr;
}

std::string shorten(const std::string& s) { return s.size() > 300 ? s.substr(0, 300) + "..." : s; }

// A \u escape of a UTF-16 surrogate (hjson-go writes U+FFFD for each half).
bool has_surrogate_escape(const std::string& text) {
  for (size_t i = 0; (i = text.find("\\u", i)) != std::string::npos; i += 2) {
    if (i + 3 < text.size() && (text[i + 2] == 'd' || text[i + 2] == 'D') &&
        std::string("89abcdefABCDEF").find(text[i + 3]) != std::string::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace

Comparison compare_with_hjson_go(const std::string& text, const std::string& path) {
  Outcome ours;
  try {
    ours.value = config_detail::parse_hjson(text, path);
    ours.accepted = true;
  } catch (const ConfigError& e) {
    ours.error = e.problems().empty() ? e.what() : e.problems()[0];
  }
  // zerocpp skips a byte-order mark; hjson-go reads it as text: compare with the file without it.
  std::string their_path = path;
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) {
    their_path = path + ".nobom";
    std::ofstream(their_path, std::ios::binary) << text.substr(3);
  }
  Outcome theirs = run_hjson_go(their_path);
  if (their_path != path) std::remove(their_path.c_str());
  if (ours.accepted == theirs.accepted && (!ours.accepted || same(ours.value, theirs.value))) {
    return {Verdict::kSame, ""};
  }
  if (ours.accepted && theirs.accepted) {
    if (has_surrogate_escape(text) && theirs.value.dump().find("\xEF\xBF\xBD") != std::string::npos) {
      return {Verdict::kKnownDifference, "hjson-go writes U+FFFD for a \\u surrogate pair"};
    }
    // hjson-go reads a key with no value at the end of the file as "\u0000"; zerocpp refuses
    // that object and reads the text as one root string instead (which no config accepts).
    if (ours.value.is_string() && theirs.value.is_object() && theirs.value.dump().find("\\u0000") != std::string::npos) {
      return {Verdict::kKnownDifference, "hjson-go reads a missing value at the end of the file as a NUL"};
    }
    return {Verdict::kMismatch, "zerocpp read " + shorten(ours.value.dump()) + "; hjson-go read " +
                                    shorten(theirs.value.dump())};
  }
  if (!ours.accepted) {
    if (const char* reason = deliberate_rejection(ours.error)) {
      return {Verdict::kKnownDifference, std::string("zerocpp refuses on purpose: ") + reason};
    }
    return {Verdict::kMismatch, "zerocpp refused (" + ours.error + "); hjson-go read " + shorten(theirs.value.dump())};
  }
  return {Verdict::kMismatch, "zerocpp read " + shorten(ours.value.dump()) + "; hjson-go refused (" + theirs.error + ")"};
}

}  // namespace zero::hjson_oracle
