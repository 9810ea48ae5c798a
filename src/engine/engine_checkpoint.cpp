// Engine::save_checkpoint / load_checkpoint (docs/checkpoints.md).
//
// DIR/TAG/manifest.json describes everything; DIR/TAG/rank<R>.bin holds rank R's owned fp32 flat
// buffers, one after the other: the master weights, then each optimizer state tensor. The
// manifest lists, per file, which element range of which named parameter sits where, so any
// layout (world size, stage, bucket size) can read any other: each rank reads the ranges of the
// parameters it owns now, from whichever files hold them.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/files.h"
#include "engine/agree.h"
#include "engine/engine_state.h"
#include "zero/error.h"

namespace zero {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
constexpr int kFormatVersion = 1;
constexpr const char* kFormatName = "zerocpp-checkpoint";

void check_tag(const std::string& tag) {
  if (tag.empty() || tag == "latest" || tag.find('/') != std::string::npos || tag.front() == '.' ||
      tag.find(".partial") != std::string::npos || tag.find(".replaced") != std::string::npos) {
    throw Error("checkpoint tag \"" + tag + "\" is not usable as a directory name", "tag");
  }
}

std::string file_name(int rank) { return "rank" + std::to_string(rank) + ".bin"; }

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

}  // namespace

std::string Engine::save_checkpoint(const std::string& dir, const std::string& requested_tag,
                                    const std::string& client_state) {
  State& s = *state_;
  const int rank = s.world.rank();
  const std::string tag = requested_tag.empty() ? "global_step" + std::to_string(s.global_steps) : requested_tag;
  check_tag(tag);
  const json client = json::parse(client_state, nullptr, false);
  if (client.is_discarded() || !client.is_object())
    throw Error("save_checkpoint: client_state is not a JSON object", "client_state", rank);
  const fs::path root(dir), partial = root / (tag + ".partial"), final_dir = root / tag;

  std::string error;
  if (rank == 0) {
    try {
      fs::create_directories(root);
      fs::remove_all(partial);  // left by an interrupted save
      fs::create_directories(partial);
    } catch (const std::exception& e) {
      error = dir + ": cannot prepare the checkpoint directory: " + e.what();
    }
  }
  engine::agree(s.comm, error, rank, "save_checkpoint");

  // Stage 0: every rank holds the same state, rank 0 writes it.
  const int partitions = s.flat->layout().world_size();
  std::vector<std::pair<std::string, at::Tensor>> kinds = {{"master", s.master}};
  for (auto& entry : s.optimizer->state()) kinds.push_back(entry);
  checkpoint::FileDigest digest;
  if (partitions > 1 || rank == 0) {
    try {
      checkpoint::HashingWriter writer((partial / file_name(rank)).string());
      for (const auto& [name, tensor] : kinds) writer.write(tensor.data_ptr(), tensor.nbytes());
      digest = writer.finish();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  engine::agree(s.comm, error, rank, "save_checkpoint");

  at::Tensor mine = at::tensor({static_cast<int64_t>(digest.bytes), static_cast<int64_t>(digest.xxh3)}, at::kLong);
  at::Tensor all = at::zeros({2 * s.world.size()}, at::kLong);
  s.comm.all_gather(mine, all, {.async = false});

  if (rank == 0) {
    try {
      json m;
      m["format"] = kFormatName;
      m["version"] = kFormatVersion;
      m["tag"] = tag;
      m["world_size"] = s.world.size();
      m["stage"] = s.config.zero.stage;
      m["model_dtype"] = std::string(c10::toString(s.flat->dtype()));
      m["train_batch_size"] = s.config.train_batch_size;
      for (const auto& [name, tensor] : kinds) m["kinds"].push_back(name);
      for (size_t i = 0; i < s.flat->params().size(); ++i) {
        m["params"].push_back({{"name", s.param_names[i]}, {"shape", s.flat->params()[i].sizes().vec()}});
      }
      for (int r = 0; r < (partitions > 1 ? partitions : 1); ++r) {
        json f = {{"file", file_name(r)},
                  {"rank", r},
                  {"bytes", static_cast<uint64_t>(all[2 * r].item<int64_t>())},
                  {"xxh3", checkpoint::hex(static_cast<uint64_t>(all[2 * r + 1].item<int64_t>()))},
                  {"owned_numel", s.flat->layout().owned_numel()},
                  {"fragments", json::array()}};
        for (int i = 0; i < static_cast<int>(s.flat->params().size()); ++i) {
          if (auto fr = s.flat->layout().fragment(i, r))
            f["fragments"].push_back({i, fr->param_begin, fr->param_end, fr->owned_offset});
        }
        m["files"].push_back(f);
      }
      m["counters"] = {{"global_steps", s.global_steps},
                       {"micro_steps", s.micro_steps},
                       {"skipped_steps", s.skipped_steps},
                       {"applied_steps", s.applied_steps}};
      m["lr_scheduler"] = {{"last_batch_iteration", s.schedule.last_batch_iteration()}};
      m["loss_scaler"] = {{"scale", s.scaler.scale()},
                          {"iteration", s.scaler.iteration()},
                          {"last_overflow_iteration", s.scaler.last_overflow_iteration()},
                          {"hysteresis_left", s.scaler.hysteresis_left()}};
      m["client_state"] = client;
      checkpoint::write_file_atomically((partial / "manifest.json").string(), m.dump(1) + "\n");
      // An existing tag moves aside before the new one takes its name; `latest` changes last, so
      // an interruption anywhere leaves `latest` naming a complete checkpoint.
      const fs::path replaced = root / (tag + ".replaced");
      fs::remove_all(replaced);
      if (fs::exists(final_dir)) fs::rename(final_dir, replaced);
      fs::rename(partial, final_dir);
      checkpoint::fsync_directory(root.string());
      checkpoint::write_file_atomically((root / "latest").string(), tag + "\n");
      fs::remove_all(replaced);
    } catch (const std::exception& e) {
      error = dir + ": cannot complete checkpoint " + tag + ": " + e.what();
    }
  }
  engine::agree(s.comm, error, rank, "save_checkpoint");
  return tag;
}

std::string Engine::load_checkpoint(const std::string& dir, const LoadOptions& options) {
  State& s = *state_;
  const int rank = s.world.rank();
  const fs::path root(dir);
  const std::string tag =
      options.tag.empty() ? trim(checkpoint::read_text_file((root / "latest").string())) : options.tag;
  check_tag(tag);
  const std::string manifest_path = (root / tag / "manifest.json").string();
  const json m = json::parse(checkpoint::read_text_file(manifest_path), nullptr, false);
  if (m.is_discarded() || !m.is_object() || m.value("format", "") != kFormatName)
    throw Error(manifest_path + ": not a zerocpp checkpoint manifest", manifest_path, rank);
  if (m.value("version", 0) != kFormatVersion)
    throw Error(manifest_path + ": format version " + m["version"].dump() + ", this build reads " +
                    std::to_string(kFormatVersion),
                manifest_path, rank);

  std::string error;
  try {
    // Parameters by name, both ways.
    std::map<std::string, int> saved_index;
    const json& saved_params = m.at("params");
    for (size_t j = 0; j < saved_params.size(); ++j) saved_index[saved_params[j].at("name")] = static_cast<int>(j);
    std::vector<int> source_of(s.param_names.size(), -1);
    std::vector<std::string> missing, unexpected;
    std::set<std::string> ours(s.param_names.begin(), s.param_names.end());
    for (size_t i = 0; i < s.param_names.size(); ++i) {
      auto found = saved_index.find(s.param_names[i]);
      if (found == saved_index.end()) {
        missing.push_back(s.param_names[i]);
        continue;
      }
      const auto shape = saved_params[static_cast<size_t>(found->second)].at("shape").get<std::vector<int64_t>>();
      if (shape != s.flat->params()[i].sizes().vec())
        throw Error(manifest_path + ": parameter " + s.param_names[i] + " has shape " +
                        saved_params[static_cast<size_t>(found->second)].at("shape").dump() + " in the checkpoint, " +
                        c10::str(s.flat->params()[i].sizes()) + " in the model",
                    manifest_path, rank);
      source_of[i] = found->second;
    }
    for (const auto& [name, j] : saved_index) {
      if (!ours.count(name)) unexpected.push_back(name);
    }
    if (options.strict && (!missing.empty() || !unexpected.empty())) {
      std::string list;
      for (const auto& n : missing) list += "\n  missing from the checkpoint: " + n;
      for (const auto& n : unexpected) list += "\n  not in the model: " + n;
      throw Error(manifest_path + ": parameter names differ (strict load)" + list, manifest_path, rank);
    }

    // What to fill: the master weights, and the optimizer state when asked.
    std::vector<std::string> saved_kinds = m.at("kinds").get<std::vector<std::string>>();
    std::vector<std::pair<size_t, at::Tensor>> targets;  // (kind index in the files, our tensor)
    auto kind_index = [&](const std::string& name) {
      auto it = std::find(saved_kinds.begin(), saved_kinds.end(), name);
      if (it == saved_kinds.end())
        throw Error(manifest_path + ": the checkpoint has no optimizer state \"" + name +
                        "\" (it was saved with another optimizer); load with load_optimizer_states = false",
                    manifest_path, rank);
      return static_cast<size_t>(it - saved_kinds.begin());
    };
    targets.emplace_back(kind_index("master"), s.master);
    if (!options.load_module_only && options.load_optimizer_states) {
      for (const auto& [name, tensor] : s.optimizer->state()) targets.emplace_back(kind_index(name), tensor);
    }

    // Where each saved parameter's ranges sit: (file, begin, end, owned offset).
    struct Source {
      size_t file;
      int64_t begin, end, offset;
    };
    const json& files = m.at("files");
    std::vector<std::vector<Source>> sources(saved_params.size());
    for (size_t f = 0; f < files.size(); ++f) {
      for (const auto& fr : files[f].at("fragments"))
        sources.at(fr.at(0).get<size_t>()).push_back({f, fr.at(1), fr.at(2), fr.at(3)});
    }
    struct OpenFiles {  // closed however the load ends
      std::vector<int> fds;
      ~OpenFiles() {
        for (int fd : fds) {
          if (fd >= 0) ::close(fd);
        }
      }
    } open{std::vector<int>(files.size(), -1)};
    std::vector<int>& fds = open.fds;
    auto open_verified = [&](size_t f) {
      if (fds[f] >= 0) return fds[f];
      const std::string path = (root / tag / files[f].at("file").get<std::string>()).string();
      const checkpoint::FileDigest digest = checkpoint::digest_file(path);
      if (digest.bytes != files[f].at("bytes").get<uint64_t>())
        throw Error(path + ": " + std::to_string(digest.bytes) + " bytes, the manifest says " +
                        files[f].at("bytes").dump() + " (truncated or replaced)",
                    path, rank);
      if (checkpoint::hex(digest.xxh3) != files[f].at("xxh3").get<std::string>())
        throw Error(path + ": checksum mismatch (xxh3 " + checkpoint::hex(digest.xxh3) + ", the manifest says " +
                        files[f].at("xxh3").get<std::string>() + "): the file is corrupt",
                    path, rank);
      fds[f] = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fds[f] < 0) throw Error(path + ": cannot open the file", path, rank);
      return fds[f];
    };
    for (size_t i = 0; i < s.param_names.size(); ++i) {
      auto mine = s.flat->layout().fragment(static_cast<int>(i), s.owner_rank);
      if (!mine || source_of[i] < 0) continue;
      int64_t covered = 0;
      for (const Source& src : sources[static_cast<size_t>(source_of[i])]) {
        const int64_t lo = std::max(mine->param_begin, src.begin), hi = std::min(mine->param_end, src.end);
        if (lo >= hi) continue;
        const int fd = open_verified(src.file);
        const std::string path = (root / tag / files[src.file].at("file").get<std::string>()).string();
        const auto owned = files[src.file].at("owned_numel").get<uint64_t>();
        for (const auto& [kind, tensor] : targets) {
          const uint64_t element = kind * owned + static_cast<uint64_t>(src.offset + (lo - src.begin));
          checkpoint::read_at(fd, path, element * sizeof(float),
                              tensor.data_ptr<float>() + mine->owned_offset + (lo - mine->param_begin),
                              static_cast<uint64_t>(hi - lo) * sizeof(float));
        }
        covered += hi - lo;
      }
      if (covered != mine->param_end - mine->param_begin)
        throw Error(manifest_path + ": parameter " + s.param_names[i] + ": the checkpoint holds " +
                        std::to_string(covered) + " of the " + std::to_string(mine->param_end - mine->param_begin) +
                        " elements this rank needs",
                    manifest_path, rank);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  engine::agree(s.comm, error, rank, "load_checkpoint");
  publish_master();
  s.reducer->zero();
  if (!options.load_module_only) {
    const json& c = m.at("counters");
    s.global_steps = c.at("global_steps");
    s.micro_steps = c.at("micro_steps");
    s.skipped_steps = c.at("skipped_steps");
    if (options.load_optimizer_states) s.applied_steps = c.at("applied_steps");
    if (options.load_lr_scheduler_states)
      s.schedule.set_last_batch_iteration(m.at("lr_scheduler").at("last_batch_iteration"));
    const json& l = m.at("loss_scaler");
    s.scaler.restore(l.at("scale"), l.at("iteration"), l.at("last_overflow_iteration"), l.at("hysteresis_left"));
  }
  return m.contains("client_state") ? m["client_state"].dump() : "{}";
}

}  // namespace zero
