#include "checkpoint/manifest.h"

#include "checkpoint/files.h"

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
