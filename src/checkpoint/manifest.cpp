#include "checkpoint/manifest.h"

#include <cstdint>

#include "checkpoint/files.h"
#include "zero/error.h"

namespace zero::checkpoint {

std::string shard_file_name(int rank) { return "rank" + std::to_string(rank) + ".bin"; }
std::string rng_file_name(int rank) { return "rank" + std::to_string(rank) + ".rng"; }

nlohmann::json to_json(const Manifest& m) {
  using json = nlohmann::json;
  json j;
  j["format"] = kFormatName;
  j["version"] = kFormatVersion;
  j["tag"] = m.tag;
  j["world_size"] = m.world_size;
  j["stage"] = m.stage;
  j["model_dtype"] = m.model_dtype;
  j["train_batch_size"] = m.train_batch_size;
  j["config_origin"] = m.config_origin;
  j["config"] = json::object();
  for (const auto& [path, value] : m.config) {
    const json parsed = json::parse(value, nullptr, false);
    j["config"][path] = parsed.is_discarded() ? json(value) : parsed;
  }
  for (const auto& kind : m.layout.kinds) j["kinds"].push_back(kind);
  if (!m.params16.empty()) j["params16"] = m.params16;
  for (const auto& p : m.layout.params) j["params"].push_back({{"name", p.name}, {"shape", p.shape}});
  for (const auto& s : m.layout.shards) {
    json f = {{"file", shard_file_name(s.rank)}, {"rank", s.rank},         {"bytes", s.bytes},
              {"xxh3", hex(s.xxh3)},             {"owned_numel", s.owned_numel}, {"fragments", json::array()}};
    for (const auto& fr : s.fragments) f["fragments"].push_back({fr.param, fr.begin, fr.end, fr.owned_offset});
    j["files"].push_back(f);
  }
  for (const auto& r : m.rng_states)
    j["rng_states"].push_back({{"file", rng_file_name(r.rank)}, {"rank", r.rank}, {"bytes", r.bytes}, {"xxh3", hex(r.xxh3)}});
  j["counters"] = {{"global_steps", m.global_steps},
                   {"micro_steps", m.micro_steps},
                   {"skipped_steps", m.skipped_steps},
                   {"applied_steps", m.applied_steps}};
  j["lr_scheduler"] = {{"last_batch_iteration", m.lr_last_batch_iteration}};
  j["loss_scaler"] = {{"scale", m.loss_scale},
                      {"iteration", m.scaler_iteration},
                      {"last_overflow_iteration", m.scaler_last_overflow_iteration},
                      {"hysteresis_left", m.scaler_hysteresis_left}};
  j["client_state"] = m.client_state;
  return j;
}

namespace {

// One manifest's checks, each failure an error naming the manifest and the key.
class ManifestCheck {
 public:
  explicit ManifestCheck(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    throw Error(path_ + ": " + key + ": " + problem, path_);
  }
  const nlohmann::json& member(const nlohmann::json& object, const std::string& key, const std::string& name) const {
    if (!object.is_object()) fail(key, "not a JSON object");
    auto it = object.find(name);
    if (it == object.end()) fail(key + "." + name, "missing");
    return *it;
  }
  int64_t integer(const nlohmann::json& v, const std::string& key, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) fail(key, "not an integer (" + v.dump().substr(0, 40) + ")");
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) fail(key, "out of range");
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) fail(key, std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }
  const std::string& text(const nlohmann::json& v, const std::string& key) const {
    if (!v.is_string()) fail(key, "not a string");
    return v.get_ref<const std::string&>();
  }
  const nlohmann::json& array(const nlohmann::json& v, const std::string& key) const {
    if (!v.is_array()) fail(key, "not an array");
    return v;
  }
  void file_name(const nlohmann::json& entry, const std::string& key) const {
    const std::string& name = text(member(entry, key, "file"), key + ".file");
    if (!is_plain_file_name(name)) {
      fail(key + ".file", "\"" + name.substr(0, 80) + "\" is not a file name inside the checkpoint (a path, \"..\" or empty)");
    }
    integer(member(entry, key, "bytes"), key + ".bytes", 0, INT64_MAX);
    const std::string& digest = text(member(entry, key, "xxh3"), key + ".xxh3");
    if (digest.size() != 16 || digest.find_first_not_of("0123456789abcdef") != std::string::npos)
      fail(key + ".xxh3", "not 16 hexadecimal digits");
  }

 private:
  std::string path_;
};

// Elements of a shape, or -1 when the product overflows int64.
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > INT64_MAX / d) return -1;
    n *= d;
  }
  return n;
}

}  // namespace

void check_manifest(const nlohmann::json& m, const std::string& path) {
  const ManifestCheck c(path);
  if (!m.is_object()) c.fail("(the manifest)", "not a JSON object");
  constexpr int64_t kMaxRanks = 1 << 24;
  c.integer(c.member(m, "(the manifest)", "world_size"), "world_size", 1, kMaxRanks);
  c.integer(c.member(m, "(the manifest)", "stage"), "stage", 0, 3);
  c.text(c.member(m, "(the manifest)", "model_dtype"), "model_dtype");
  c.integer(c.member(m, "(the manifest)", "train_batch_size"), "train_batch_size", 0, INT64_MAX);
  if (m.contains("params16")) c.text(m["params16"], "params16");
  // Parameters: names and shapes whose element counts (and their sum) fit in int64.
  const nlohmann::json& params = c.array(c.member(m, "(the manifest)", "params"), "params");
  std::vector<int64_t> numels;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string key = "params[" + std::to_string(i) + "]";
    c.text(c.member(params[i], key, "name"), key + ".name");
    const nlohmann::json& shape = c.array(c.member(params[i], key, "shape"), key + ".shape");
    if (shape.size() > 16) c.fail(key + ".shape", "more than 16 dimensions");
    std::vector<int64_t> dims;
    for (size_t d = 0; d < shape.size(); ++d)
      dims.push_back(c.integer(shape[d], key + ".shape[" + std::to_string(d) + "]", 0, INT64_MAX));
    const int64_t n = checked_numel(dims);
    if (n < 0) c.fail(key + ".shape", "its element count overflows");
    numels.push_back(n);
  }
  const nlohmann::json& kinds = c.array(c.member(m, "(the manifest)", "kinds"), "kinds");
  if (kinds.empty() || kinds.size() > 64) c.fail("kinds", "between 1 and 64 state kinds expected");
  for (size_t k = 0; k < kinds.size(); ++k) c.text(kinds[k], "kinds[" + std::to_string(k) + "]");
  // Rank files: each fragment inside its parameter and inside the file's owned buffer, and the
  // file's size what its kinds of owned elements make (checked again against the file itself).
  const nlohmann::json& files = c.array(c.member(m, "(the manifest)", "files"), "files");
  if (files.size() > static_cast<size_t>(kMaxRanks)) c.fail("files", "more files than ranks can be");
  int64_t total_owned = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string key = "files[" + std::to_string(f) + "]";
    c.file_name(files[f], key);
    c.integer(c.member(files[f], key, "rank"), key + ".rank", 0, kMaxRanks);
    const int64_t owned = c.integer(c.member(files[f], key, "owned_numel"), key + ".owned_numel", 0, INT64_MAX / 256);
    // Each kind's owned fp32 elements are in the file (whose size is checked against the disk).
    const int64_t bytes = files[f]["bytes"].get<int64_t>();
    if (owned > bytes / 4 / static_cast<int64_t>(kinds.size()))
      c.fail(key + ".owned_numel", std::to_string(owned) + " elements of " + std::to_string(kinds.size()) +
                                       " kinds do not fit in the file's " + std::to_string(bytes) + " bytes");
    total_owned += owned;
    const nlohmann::json& fragments = c.array(c.member(files[f], key, "fragments"), key + ".fragments");
    for (size_t g = 0; g < fragments.size(); ++g) {
      const std::string fk = key + ".fragments[" + std::to_string(g) + "]";
      if (!fragments[g].is_array() || fragments[g].size() != 4) c.fail(fk, "not [param, begin, end, owned_offset]");
      const int64_t param = c.integer(fragments[g][0], fk + "[0]", 0, static_cast<int64_t>(numels.size()) - 1);
      const int64_t begin = c.integer(fragments[g][1], fk + "[1]", 0, numels[static_cast<size_t>(param)]);
      const int64_t end = c.integer(fragments[g][2], fk + "[2]", begin, numels[static_cast<size_t>(param)]);
      c.integer(fragments[g][3], fk + "[3]", 0, owned - (end - begin));
    }
  }
  // No parameter has more elements than the files hold together: a load sized by a shape is
  // sized by bytes on disk.
  for (size_t i = 0; i < numels.size(); ++i) {
    if (numels[i] > total_owned)
      c.fail("params[" + std::to_string(i) + "].shape", std::to_string(numels[i]) + " elements, more than the " +
                                                          std::to_string(total_owned) + " the files hold");
  }
  for (const char* list : {"rng_states"}) {
    if (!m.contains(list)) continue;
    const nlohmann::json& entries = c.array(m[list], list);
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string key = std::string(list) + "[" + std::to_string(i) + "]";
      c.file_name(entries[i], key);
      c.integer(c.member(entries[i], key, "rank"), key + ".rank", 0, kMaxRanks);
      // A random state is a few KB (LibTorch's CPU generator): read whole, so bounded.
      c.integer(entries[i]["bytes"], key + ".bytes", 0, 1 << 20);
    }
  }
  // What a load restores.
  const nlohmann::json& counters = c.member(m, "(the manifest)", "counters");
  for (const char* k : {"global_steps", "micro_steps", "skipped_steps", "applied_steps"})
    c.integer(c.member(counters, "counters", k), std::string("counters.") + k, 0, INT64_MAX);
  const nlohmann::json& schedule = c.member(m, "(the manifest)", "lr_scheduler");
  c.integer(c.member(schedule, "lr_scheduler", "last_batch_iteration"), "lr_scheduler.last_batch_iteration", -1,
            INT64_MAX);
  const nlohmann::json& scaler = c.member(m, "(the manifest)", "loss_scaler");
  if (!c.member(scaler, "loss_scaler", "scale").is_number()) c.fail("loss_scaler.scale", "not a number");
  c.integer(c.member(scaler, "loss_scaler", "iteration"), "loss_scaler.iteration", INT64_MIN, INT64_MAX);
  c.integer(c.member(scaler, "loss_scaler", "last_overflow_iteration"), "loss_scaler.last_overflow_iteration",
            INT64_MIN, INT64_MAX);
  c.integer(c.member(scaler, "loss_scaler", "hysteresis_left"), "loss_scaler.hysteresis_left", INT32_MIN, INT32_MAX);
}

ManifestLayout layout_from_json(const nlohmann::json& j) {
  ManifestLayout layout;
  for (const auto& p : j.at("params"))
    layout.params.push_back({p.at("name").get<std::string>(), p.at("shape").get<std::vector<int64_t>>()});
  layout.kinds = j.at("kinds").get<std::vector<std::string>>();
  for (const auto& f : j.at("files")) {
    ManifestShard shard;
    shard.rank = f.at("rank");
    shard.bytes = f.at("bytes");
    shard.owned_numel = f.at("owned_numel");
    for (const auto& fr : f.at("fragments")) shard.fragments.push_back({fr.at(0), fr.at(1), fr.at(2), fr.at(3)});
    layout.shards.push_back(std::move(shard));
  }
  return layout;
}

}  // namespace zero::checkpoint
