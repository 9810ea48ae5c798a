#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_set>

#include "launch/launch_plan.h"
#include "zero/error.h"

namespace zero::launch {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string strip_comment(const std::string& line) { return trim(line.substr(0, line.find('#'))); }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!s.empty() && s.back() == sep) parts.emplace_back();
  return parts;
}

bool parse_non_negative(const std::string& s, int* out) {
  if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), ::isdigit)) return false;
  *out = std::stoi(s);
  return true;
}

// "host1@host2:0,2" → {host1: all, host2: {0, 2}}; `all` is an empty slot list.
std::vector<HostSlots> parse_filter(const std::string& spec, const char* flag, const std::vector<HostSlots>& pool) {
  std::vector<HostSlots> out;
  std::set<std::string> seen;
  for (const std::string& entry : split(spec, '@')) {
    std::string host = entry, slots;
    if (auto colon = entry.find(':'); colon != std::string::npos) {
      host = entry.substr(0, colon);
      slots = entry.substr(colon + 1);
    }
    if (host.empty()) throw Error(fmt::format("{} \"{}\": empty host name", flag, spec), flag);
    auto known = std::find_if(pool.begin(), pool.end(), [&](const HostSlots& h) { return h.host == host; });
    if (known == pool.end())
      throw Error(fmt::format("{} \"{}\": host \"{}\" is not in the hostfile", flag, spec, host), flag);
    if (!seen.insert(host).second)
      throw Error(fmt::format("{} \"{}\": host \"{}\" is named twice", flag, spec, host), flag);
    HostSlots h{host, {}};
    if (entry.find(':') != std::string::npos) {
      for (const std::string& s : split(slots, ',')) {
        int slot = 0;
        if (!parse_non_negative(s, &slot))
          throw Error(fmt::format("{} \"{}\": bad slot \"{}\" for host \"{}\"", flag, spec, s, host), flag);
        if (std::find(known->slots.begin(), known->slots.end(), slot) == known->slots.end()) {
          throw Error(fmt::format("{} \"{}\": host \"{}\" has no slot {} (it has {})", flag, spec, host, slot,
                                  known->slots.size()),
                      flag);
        }
        h.slots.push_back(slot);
      }
    }
    out.push_back(h);
  }
  return out;
}

// A host name as DNS, /etc/hosts or an IPv4/IPv6 address spells it: letters, digits, '.', '-',
// '_' and ':', at most 253, never a leading '-' or '.'. Anything else (a name that starts with
// '-' would reach ssh as an option, e.g. "-oProxyCommand=...") is refused.
bool is_host_name(const std::string& host) {
  if (host.empty() || host.size() > 253 || host.front() == '-' || host.front() == '.') return false;
  return std::all_of(host.begin(), host.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || c == ':';
  });
}

// More slots than this on one host is a typo or a hostile file (DeepSpeed's hosts have a few GPUs;
// a CPU host one slot per core).
constexpr int kMaxSlotsPerHost = 4096;
// More hosts than the largest clusters have.
constexpr size_t kMaxHosts = 65536;

}  // namespace

std::vector<HostSlots> parse_hostfile(const std::string& text, const std::string& origin) {
  std::vector<HostSlots> hosts;
  std::unordered_set<std::string> listed;
  std::istringstream in(text);
  std::string raw;
  for (int line = 1; std::getline(in, raw); ++line) {
    std::string content = strip_comment(raw);
    if (content.empty()) continue;
    std::istringstream words(content);
    std::string host, slots_word, extra;
    words >> host >> slots_word >> extra;
    int slots = 0;
    if (slots_word.rfind("slots=", 0) != 0 || !extra.empty() || !parse_non_negative(slots_word.substr(6), &slots) ||
        slots == 0) {
      throw Error(fmt::format("{} line {}: expected \"HOST slots=N\" with N >= 1, got \"{}\"", origin, line,
                              content.substr(0, 200)),
                  origin);
    }
    if (!is_host_name(host)) {
      throw Error(fmt::format("{} line {}: \"{}\" is not a host name (letters, digits, '.', '-', '_' and ':', not "
                              "starting with '-' or '.')",
                              origin, line, host.substr(0, 200)),
                  origin);
    }
    if (slots > kMaxSlotsPerHost) {
      throw Error(fmt::format("{} line {}: host \"{}\" has slots={}, more than {} per host", origin, line, host,
                              slots, kMaxSlotsPerHost),
                  origin);
    }
    if (hosts.size() == kMaxHosts)
      throw Error(fmt::format("{} line {}: more than {} hosts", origin, line, kMaxHosts), origin);
    if (!listed.insert(host).second)  // by hash: linear in the hosts
      throw Error(fmt::format("{} line {}: host \"{}\" is listed twice", origin, line, host), origin);
    HostSlots h{host, {}};
    for (int s = 0; s < slots; ++s) h.slots.push_back(s);
    hosts.push_back(h);
  }
  if (hosts.empty())
    throw Error(fmt::format("{}: no hosts (expected lines like \"worker-1 slots=4\")", origin), origin);
  return hosts;
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
  // A regular file of a size a hostfile can have (a FIFO or a device would never end).
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(fmt::format("the hostfile {} is not a regular file (or cannot be read)", path), path);
  if (std::filesystem::file_size(path, ec) > (uint64_t{64} << 20))
    throw Error(fmt::format("the hostfile {} is larger than 64 MiB", path), path);
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("cannot open the hostfile {}", path), path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_hostfile(text.str(), path);
}

std::vector<HostSlots> apply_include(const std::vector<HostSlots>& pool, const std::string& spec) {
  std::vector<HostSlots> chosen = parse_filter(spec, "--include", pool);
  std::vector<HostSlots> out;
  for (const auto& host : pool) {  // keep hostfile order
    for (const auto& c : chosen) {
      if (c.host != host.host) continue;
      HostSlots h{host.host, c.slots.empty() ? host.slots : c.slots};
      std::sort(h.slots.begin(), h.slots.end());
      out.push_back(h);
    }
  }
  return out;
}

std::vector<HostSlots> apply_exclude(const std::vector<HostSlots>& pool, const std::string& spec) {
  std::vector<HostSlots> removed = parse_filter(spec, "--exclude", pool);
  std::vector<HostSlots> out;
  for (const auto& host : pool) {
    auto r = std::find_if(removed.begin(), removed.end(), [&](const HostSlots& x) { return x.host == host.host; });
    if (r == removed.end()) {
      out.push_back(host);
      continue;
    }
    if (r->slots.empty()) continue;  // the whole host
    HostSlots h{host.host, {}};
    for (int s : host.slots) {
      if (std::find(r->slots.begin(), r->slots.end(), s) == r->slots.end()) h.slots.push_back(s);
    }
    if (!h.slots.empty()) out.push_back(h);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> parse_env_file(const std::string& text, const std::string& origin) {
  std::vector<std::pair<std::string, std::string>> env;
  std::istringstream in(text);
  std::string raw;
  for (int line = 1; std::getline(in, raw); ++line) {
    std::string content = trim(raw);
    if (content.empty() || content[0] == '#') continue;
    auto eq = content.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Error(fmt::format("{} line {}: expected KEY=VALUE, got \"{}\"", origin, line, content), origin);
    }
    env.emplace_back(trim(content.substr(0, eq)), content.substr(eq + 1));
  }
  return env;
}

}  // namespace zero::launch
