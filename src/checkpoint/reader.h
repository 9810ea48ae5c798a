// CheckpointReader — reads a zerocpp checkpoint (docs/checkpoints.md) without LibTorch: the
// manifest, and any element range of any saved parameter's fp32 state, assembled from whichever
// rank files hold its fragments. The engine's load_checkpoint and zero-ckpt both read through it.
// Every problem is a zero::Error naming the file, and the parameter where there is one.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"

namespace zero::checkpoint {


// A tag must be usable as one directory name, and not one the save itself uses ("latest",
// TAG.partial, TAG.replaced); an error naming it otherwise.
void check_tag(const std::string& tag);

class CheckpointReader {
 public:
  // DIR/TAG; an empty tag reads DIR/latest. Parses and checks the manifest (format, version).
  CheckpointReader(const std::string& dir, const std::string& tag = "");
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& tag() const { return tag_; }
  const std::string& manifest_path() const { return manifest_path_; }
  const nlohmann::json& manifest() const { return manifest_; }

  int num_params() const { return static_cast<int>(names_.size()); }
  const std::string& name(int param) const { return names_[static_cast<size_t>(param)]; }
  std::vector<int64_t> shape(int param) const;
  int64_t numel(int param) const;
  int find(const std::string& name) const;  // -1 when the checkpoint has no such parameter
  // The index of a state kind ("master", "exp_avg", ...), or -1.
  int kind(const std::string& name) const;

  // Elements [begin, end) of saved parameter `param`'s state `kind`, as fp32, into `out`. A file
  // is verified (size and XXH3 checksum) the first time it is read.
  void read(int param, int kind, int64_t begin, int64_t end, float* out);
  // What read() of that range would check, reading nothing: every file holding part of it is
  // verified and the range is covered (for loads that must not write before all is known good).
  void verify(int param, int64_t begin, int64_t end);
  // A 16-bit model's weights as it held them ("BFloat16" or "Half"; empty for an fp32 model),
  // and elements [begin, end) of a parameter's, as raw 16-bit values.
  std::string params16_dtype() const { return manifest_.value("params16", ""); }
  void read16(int param, int64_t begin, int64_t end, uint16_t* out);
  // Rank `rank`'s saved CPU random state, verified; empty when the checkpoint holds none for it.
  std::string rng_state(int rank) const;
  // Verifies every file of the checkpoint (size and checksum): shards and random states.
  void verify_all();
  // Per file (shards, then random states): name, bytes, checksum as in the manifest.
  struct FileInfo {
    std::string name;
    uint64_t bytes = 0;
    std::string xxh3;
  };
  std::vector<FileInfo> files() const;

 private:
  struct Source {
    size_t file;
    int64_t begin, end, offset;
  };
  int open_verified(size_t file);
  // The file a manifest entry names, opened inside DIR/TAG (a plain name, a regular file, not a
  // link) and verified: an error naming it unless its size and checksum are the entry's.
  int open_checked(const nlohmann::json& entry) const;
  void check_digest(int fd, const std::string& path, const nlohmann::json& entry) const;
  std::string in_tag(const std::string& file) const;  // DIR/TAG/file
  // Elements [begin, end) of a parameter from the section of every file that starts at
  // `section` elements of `element_bytes` each, times the file's owned_numel; out == nullptr:
  // the checks only.
  void read_section(int param, uint64_t section, uint64_t element_bytes, int64_t begin, int64_t end, char* out);
  std::string path_of(size_t file) const;

  std::string dir_, tag_, manifest_path_;
  nlohmann::json manifest_;
  std::vector<std::string> names_;
  std::map<std::string, int> index_;
  std::vector<std::string> kinds_;
  std::vector<std::vector<Source>> sources_;  // per saved parameter
  std::vector<int> fds_;                      // per file, -1 until opened
};

}  // namespace zero::checkpoint
