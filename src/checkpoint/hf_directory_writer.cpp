#include "checkpoint/hf_directory_writer.h"

#include <fmt/core.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/files.h"
#include "zero/error.h"

namespace zero::checkpoint {
namespace fs = std::filesystem;

uint64_t parse_shard_size(const std::string& text) {
  size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    throw Error("\"" + text + "\" is not a size (bytes, or a number with KB, MB, GB, KiB, MiB, GiB)", text);
  }
  std::string unit = text.substr(used);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  static const std::map<std::string, double> units = {{"", 1},          {"B", 1},           {"KB", 1e3},
                                                      {"MB", 1e6},       {"GB", 1e9},        {"KIB", 1024.0},
                                                      {"MIB", 1048576.0}, {"GIB", 1073741824.0}};
  const auto it = units.find(unit);
  if (it == units.end() || number < 0)
    throw Error("\"" + text + "\" is not a size (bytes, or a number with KB, MB, GB, KiB, MiB, GiB)", text);
  return static_cast<uint64_t>(number * it->second);
}

HfDirectoryPlan plan_hf_directory(const std::vector<SafetensorsEntry>& entries, uint64_t max_shard_bytes) {
  HfDirectoryPlan plan;
  std::vector<size_t> shard_of(entries.size(), 0);
  size_t shards = entries.empty() ? 0 : 1;
  uint64_t in_shard = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const uint64_t b = entries[i].bytes;
    if (max_shard_bytes > 0 && in_shard > 0 && in_shard + b > max_shard_bytes) {
      ++shards;
      in_shard = 0;
    }
    if (in_shard == 0) plan.first_entry.push_back(i);
    shard_of[i] = shards - 1;
    in_shard += b;
  }
  if (entries.empty()) plan.first_entry.push_back(0);
  const size_t n = std::max<size_t>(1, shards);
  for (size_t s = 0; s < n; ++s)
    plan.files.push_back(n == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, n));
  for (size_t i = 0; i < entries.size(); ++i) plan.file_of.push_back(plan.files[shard_of[i]]);
  return plan;
}

HfDirectoryWriter::HfDirectoryWriter(std::string dir, std::vector<SafetensorsEntry> entries, uint64_t max_shard_bytes)
    : dir_(std::move(dir)), staging_(dir_ + ".partial"), entries_(std::move(entries)) {
  if (fs::exists(dir_) && !fs::is_directory(dir_)) throw Error(dir_ + ": exists and is not a directory", dir_);
  std::set<std::string> names;
  for (const auto& e : entries_)
    if (!names.insert(e.name).second) throw Error(dir_ + ": tensor " + e.name + " is exported twice", e.name);
  plan_ = plan_hf_directory(entries_, max_shard_bytes);
  std::error_code ec;
  fs::remove_all(staging_, ec);  // a previous attempt's leftovers
  if (!fs::create_directories(staging_, ec) || ec)
    throw Error(staging_ + ": cannot create the staging folder: " + ec.message(), staging_);
  open_next_file();
}

HfDirectoryWriter::~HfDirectoryWriter() {
  if (finished_) return;
  writer_.reset();
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

void HfDirectoryWriter::open_next_file() {
  const size_t first = plan_.first_entry[next_file_];
  const size_t end = next_file_ + 1 < plan_.first_entry.size() ? plan_.first_entry[next_file_ + 1] : entries_.size();
  std::vector<SafetensorsEntry> mine(entries_.begin() + static_cast<std::ptrdiff_t>(first),
                                     entries_.begin() + static_cast<std::ptrdiff_t>(end));
  writer_ = std::make_unique<SafetensorsWriter>((fs::path(staging_) / plan_.files[next_file_]).string(), mine,
                                                std::map<std::string, std::string>{{"format", "pt"}});
  ++next_file_;
}

void HfDirectoryWriter::append(const void* data, uint64_t bytes) {
  if (next_entry_ >= entries_.size()) throw Error(dir_ + ": more tensors appended than planned", dir_);
  if (next_file_ < plan_.first_entry.size() && next_entry_ == plan_.first_entry[next_file_]) {
    writer_->finish();
    open_next_file();
  }
  writer_->append(data, bytes);
  ++next_entry_;
}

void HfDirectoryWriter::add_file(const std::string& name, const std::string& text) {
  write_file_atomically((fs::path(staging_) / name).string(), text);
  extra_files_.push_back(name);
}

void HfDirectoryWriter::finish() {
  if (next_entry_ != entries_.size())
    throw Error(dir_ + ": " + std::to_string(entries_.size() - next_entry_) + " tensors were never written", dir_);
  writer_->finish();
  std::vector<std::string> written = plan_.files;
  if (plan_.files.size() > 1) {
    nlohmann::ordered_json index;
    uint64_t total = 0;
    for (const auto& e : entries_) total += e.bytes;
    index["metadata"] = {{"total_size", total}};
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    for (size_t i = 0; i < entries_.size(); ++i) map[entries_[i].name] = plan_.file_of[i];
    index["weight_map"] = map;
    write_file_atomically((fs::path(staging_) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
    written.push_back("model.safetensors.index.json");
  }
  fsync_directory(staging_);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw Error(dir_ + ": cannot create: " + ec.message(), dir_);
  // Old weights that this export does not replace would make the directory ambiguous.
  const std::set<std::string> ours(written.begin(), written.end());
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    const bool weights = name == "model.safetensors.index.json" ||
                         (name.starts_with("model") && name.ends_with(".safetensors"));
    if (weights && !ours.contains(name)) fs::remove(entry.path());
  }
  written.insert(written.end(), extra_files_.begin(), extra_files_.end());
  for (const auto& name : written) {
    fs::rename(fs::path(staging_) / name, fs::path(dir_) / name, ec);
    if (ec) throw Error(dir_ + "/" + name + ": cannot move into place: " + ec.message(), dir_);
  }
  fsync_directory(dir_);
  fs::remove_all(staging_, ec);
  finished_ = true;
}

}  // namespace zero::checkpoint
