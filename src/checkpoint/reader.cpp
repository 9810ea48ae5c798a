#include "checkpoint/reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "checkpoint/files.h"
#include "zero/error.h"
#include "util/json_from_file.h"

namespace zero::checkpoint {
namespace {

namespace fs = std::filesystem;

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

}  // namespace

void check_tag(const std::string& tag) {
  if (tag.empty() || tag == "latest" || tag.find('/') != std::string::npos || tag.front() == '.' ||
      tag.find(".partial") != std::string::npos || tag.find(".replaced") != std::string::npos) {
    throw Error("checkpoint tag \"" + tag + "\" is not usable as a directory name", "tag");
  }
}

CheckpointReader::CheckpointReader(const std::string& dir, const std::string& tag) : dir_(dir) {
  tag_ = tag.empty() ? trim(read_text_file((fs::path(dir) / "latest").string())) : tag;
  check_tag(tag_);
  manifest_path_ = (fs::path(dir) / tag_ / "manifest.json").string();
  manifest_ = parse_json_from(read_text_file(manifest_path_), manifest_path_, /*allow_exceptions=*/false);
  if (manifest_.is_discarded() || !manifest_.is_object() || manifest_.value("format", "") != kFormatName)
    throw Error(manifest_path_ + ": not a zerocpp checkpoint manifest", manifest_path_);
  if (manifest_.value("version", 0) != kFormatVersion)
    throw Error(manifest_path_ + ": format version " + manifest_["version"].dump() + ", this build reads " +
                    std::to_string(kFormatVersion),
                manifest_path_);
  check_manifest(manifest_, manifest_path_);  // every key below is there, typed and in range
  // The files' sizes against the manifest's before anything is sized by it (a missing file is
  // reported when it is first read).
  for (const char* list : {"files", "rng_states"}) {
    for (const auto& entry : manifest_.value(list, nlohmann::json::array())) {
      const fs::path file = fs::path(dir_) / tag_ / entry["file"].get<std::string>();
      std::error_code ec;
      const fs::file_status st = fs::symlink_status(file, ec);
      if (ec || !fs::exists(st) || !fs::is_regular_file(st)) continue;  // opened (and refused) when read
      const uint64_t bytes = fs::file_size(file, ec);
      if (!ec && bytes != entry["bytes"].get<uint64_t>())
        throw Error(file.string() + ": " + std::to_string(bytes) + " bytes, the manifest says " +
                        entry["bytes"].dump() + " (truncated or replaced)",
                    file.string());
    }
  }
  try {
    const ManifestLayout layout = layout_from_json(manifest_);
    for (const auto& p : layout.params) {
      index_[p.name] = static_cast<int>(names_.size());
      names_.push_back(p.name);
    }
    kinds_ = layout.kinds;
    sources_.resize(names_.size());
    for (size_t f = 0; f < layout.shards.size(); ++f) {
      for (const auto& fr : layout.shards[f].fragments)
        sources_.at(static_cast<size_t>(fr.param)).push_back({f, fr.begin, fr.end, fr.owned_offset});
    }
    fds_.assign(layout.shards.size(), -1);
  } catch (const nlohmann::json::exception& e) {
    throw Error(manifest_path_ + ": malformed manifest: " + e.what(), manifest_path_);
  }
}

CheckpointReader::~CheckpointReader() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

std::vector<int64_t> CheckpointReader::shape(int param) const {
  return manifest_["params"][static_cast<size_t>(param)]["shape"].get<std::vector<int64_t>>();
}

int64_t CheckpointReader::numel(int param) const {
  int64_t n = 1;
  for (int64_t d : shape(param)) n *= d;
  return n;
}

int CheckpointReader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

int CheckpointReader::kind(const std::string& name) const {
  auto it = std::find(kinds_.begin(), kinds_.end(), name);
  return it == kinds_.end() ? -1 : static_cast<int>(it - kinds_.begin());
}

std::string CheckpointReader::in_tag(const std::string& file) const { return (fs::path(dir_) / tag_ / file).string(); }

std::string CheckpointReader::path_of(size_t file) const {
  return in_tag(manifest_["files"][file]["file"].get<std::string>());
}

std::vector<CheckpointReader::FileInfo> CheckpointReader::files() const {
  std::vector<FileInfo> out;
  for (const char* list : {"files", "rng_states"}) {
    for (const auto& f : manifest_.value(list, nlohmann::json::array()))
      out.push_back({f["file"], f["bytes"], f["xxh3"]});
  }
  return out;
}

int CheckpointReader::open_checked(const nlohmann::json& entry) const {
  const std::string name = entry.at("file").get<std::string>();
  const int fd = open_file_in((fs::path(dir_) / tag_).string(), name);
  try {
    check_digest(fd, in_tag(name), entry);
  } catch (...) {
    ::close(fd);
    throw;
  }
  return fd;
}

void CheckpointReader::check_digest(int fd, const std::string& path, const nlohmann::json& entry) const {
  const FileDigest digest = digest_descriptor(fd, path);
  if (digest.bytes != entry.at("bytes").get<uint64_t>())
    throw Error(path + ": " + std::to_string(digest.bytes) + " bytes, the manifest says " + entry.at("bytes").dump() +
                    " (truncated or replaced)",
                path);
  if (hex(digest.xxh3) != entry.at("xxh3").get<std::string>())
    throw Error(path + ": checksum mismatch (xxh3 " + hex(digest.xxh3) + ", the manifest says " +
                    entry.at("xxh3").get<std::string>() + "): the file is corrupt",
                path);
}

int CheckpointReader::open_verified(size_t file) {
  if (fds_[file] < 0) fds_[file] = open_checked(manifest_["files"][file]);
  return fds_[file];
}

std::string CheckpointReader::rng_state(int rank) const {
  const nlohmann::json& states = manifest_.value("rng_states", nlohmann::json::array());
  if (rank < 0 || static_cast<size_t>(rank) >= states.size()) return "";
  const nlohmann::json& entry = states[static_cast<size_t>(rank)];
  const int fd = open_checked(entry);  // its size is the manifest's, checked
  std::string state(entry.at("bytes").get<uint64_t>(), '\0');
  try {
    read_at(fd, in_tag(entry.at("file").get<std::string>()), 0, state.data(), state.size());
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return state;
}

void CheckpointReader::verify_all() {
  for (size_t f = 0; f < fds_.size(); ++f) open_verified(f);
  for (const auto& entry : manifest_.value("rng_states", nlohmann::json::array())) ::close(open_checked(entry));
}

void CheckpointReader::read(int param, int kind, int64_t begin, int64_t end, float* out) {
  read_section(param, static_cast<uint64_t>(kind), sizeof(float), begin, end, reinterpret_cast<char*>(out));
}

void CheckpointReader::verify(int param, int64_t begin, int64_t end) {
  read_section(param, 0, sizeof(float), begin, end, nullptr);
}

void CheckpointReader::read16(int param, int64_t begin, int64_t end, uint16_t* out) {
  if (params16_dtype().empty())
    throw Error(manifest_path_ + ": the checkpoint holds no 16-bit weights (an fp32 model)", manifest_path_);
  // After the fp32 kinds: kinds × owned fp32 elements = 2 × kinds × owned 16-bit ones.
  read_section(param, 2 * kinds_.size(), sizeof(uint16_t), begin, end, reinterpret_cast<char*>(out));
}

void CheckpointReader::read_section(int param, uint64_t section, uint64_t element_bytes, int64_t begin, int64_t end,
                                    char* out) {
  int64_t covered = 0;
  for (const Source& src : sources_.at(static_cast<size_t>(param))) {
    const int64_t lo = std::max(begin, src.begin), hi = std::min(end, src.end);
    if (lo >= hi) continue;
    const int fd = open_verified(src.file);
    const auto owned = manifest_["files"][src.file].at("owned_numel").get<uint64_t>();
    const uint64_t element = section * owned + static_cast<uint64_t>(src.offset + (lo - src.begin));
    if (out != nullptr) {
      read_at(fd, path_of(src.file), element * element_bytes, out + (lo - begin) * static_cast<int64_t>(element_bytes),
              static_cast<uint64_t>(hi - lo) * element_bytes);
    }
    covered += hi - lo;
  }
  if (covered != end - begin)
    throw Error(manifest_path_ + ": parameter " + name(param) + ": the checkpoint holds " + std::to_string(covered) +
                    " of the elements " + std::to_string(begin) + ".." + std::to_string(end) + " asked for",
                manifest_path_);
}

}  // namespace zero::checkpoint
