#include "checkpoint/parts.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include "checkpoint/files.h"
#include "zero/error.h"

namespace zero::checkpoint {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string tensor_parallel_root(const std::string& dir, int rank, int size) {
  return (fs::path(dir) / ("tensor_parallel_" + std::to_string(rank) + "_of_" + std::to_string(size))).string();
}

std::string pipeline_root(const std::string& dir, int stage, int stages) {
  return (fs::path(dir) / ("pipeline_" + std::to_string(stage) + "_of_" + std::to_string(stages))).string();
}

namespace {

std::string trimmed(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n"), last = text.find_last_not_of(" \t\r\n");
  return first == std::string::npos ? "" : text.substr(first, last - first + 1);
}

// A part's "tensor_parallel" block (absent: every parameter whole), checked against its shapes
// before anything is sized by it: the manifest is a file from elsewhere.
std::vector<SavedSlice> read_slices(const CheckpointReader& r, int rank, int size) {
  const json& m = r.manifest();
  const std::string& path = r.manifest_path();
  std::vector<SavedSlice> slices(static_cast<size_t>(r.num_params()));
  for (int j = 0; j < r.num_params(); ++j) slices[static_cast<size_t>(j)].whole = r.numel(j);
  if (!m.contains("tensor_parallel")) {
    if (size > 1) throw Error(path + ": a tensor-parallel part without its \"tensor_parallel\" block", path);
    return slices;
  }
  const json& tp = m["tensor_parallel"];
  auto bad = [&](const std::string& why) { return Error(path + ": tensor_parallel." + why, path); };
  if (!tp.is_object() || !tp.contains("size") || !tp["size"].is_number_integer() || tp["size"].get<int64_t>() != size ||
      !tp.contains("rank") || !tp["rank"].is_number_integer() || tp["rank"].get<int64_t>() != rank)
    throw bad("size/rank: expected " + std::to_string(size) + " and " + std::to_string(rank) + " (its directory's)");
  const json& list = tp.value("slices", json());
  if (!list.is_array() || list.size() != slices.size())
    throw bad("slices: expected one per parameter (" + std::to_string(slices.size()) + ")");
  for (int j = 0; j < r.num_params(); ++j) {
    const json& e = list[static_cast<size_t>(j)];
    const std::string at = "slices[" + std::to_string(j) + "]";
    if (!e.is_array() || e.size() != 3 || !e[0].is_number_integer() || !e[1].is_number_integer() ||
        !e[2].is_number_integer())
      throw bad(at + ": expected [dim, start, whole size]");
    const std::vector<int64_t> shape = r.shape(j);
    SavedSlice& slice = slices[static_cast<size_t>(j)];
    const int64_t dim = e[0].get<int64_t>(), start = e[1].get<int64_t>(), whole = e[2].get<int64_t>();
    if (dim < -1 || dim >= static_cast<int64_t>(shape.size())) throw bad(at + ": dim " + std::to_string(dim));
    if (dim == -1) continue;
    const int64_t length = shape[static_cast<size_t>(dim)];
    if (start < 0 || whole < 0 || whole > (int64_t{1} << 40) || start > whole - length)
      throw bad(at + ": " + std::to_string(length) + " from " + std::to_string(start) + " of " + std::to_string(whole));
    slice = {static_cast<int>(dim), start, whole};
  }
  return slices;
}

}  // namespace

CheckpointParts::CheckpointParts(const std::string& dir, const std::string& requested) {
  const std::string tag = requested.empty() ? trimmed(read_text_file((fs::path(dir) / "latest").string()))
                                            : requested;
  check_tag(tag);
  std::error_code ec;
  if (fs::is_directory(fs::path(dir) / tag, ec)) {
    parts_.push_back({std::make_unique<CheckpointReader>(dir, tag), {}});
    parts_.back().slices = read_slices(*parts_.back().reader, 0, 1);
    check_tiling();
    return;
  }
  std::vector<int> sizes;  // n of every DIR/tensor_parallel_0_of_<n> holding TAG
  int seen = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end && seen < 100000; it.increment(ec), ++seen) {
    const std::string name = it->path().filename().string(), prefix = "tensor_parallel_0_of_";
    if (name.rfind(prefix, 0) != 0 || name.size() > prefix.size() + 4) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits[0] == '0') continue;
    if (fs::is_directory(it->path() / tag, ec)) sizes.push_back(std::stoi(digits));
  }
  if (sizes.empty()) throw Error(dir + ": no checkpoint " + tag + " (no " + dir + "/" + tag + ", nor parts of one)", dir);
  if (sizes.size() > 1)
    throw Error(dir + ": checkpoint " + tag + " is saved at tensor-parallel sizes " + std::to_string(sizes[0]) +
                    " and " + std::to_string(sizes[1]) + ": remove one",
                dir);
  const int size = sizes[0];
  for (int t = 0; t < size; ++t) {
    parts_.push_back({std::make_unique<CheckpointReader>(tensor_parallel_root(dir, t, size), tag), {}});
    parts_.back().slices = read_slices(*parts_.back().reader, t, size);
    const CheckpointReader& r = *parts_.back().reader;
    const CheckpointReader& first = *parts_.front().reader;
    if (r.num_params() != first.num_params())
      throw Error(r.manifest_path() + ": another set of parameters than " + first.manifest_path(), r.manifest_path());
    for (int j = 0; j < r.num_params(); ++j) {
      if (r.name(j) != first.name(j))
        throw Error(r.manifest_path() + ": parameter " + std::to_string(j) + " is " + r.name(j) + ", " + first.name(j) +
                        " in " + first.manifest_path(),
                    r.manifest_path());
      const SavedSlice& a = parts_.back().slices[static_cast<size_t>(j)];
      const SavedSlice& b = parts_.front().slices[static_cast<size_t>(j)];
      // The same slicing, and the same sizes along every other dimension.
      std::vector<int64_t> mine = r.shape(j), theirs = first.shape(j);
      if (a.dim >= 0 && mine.size() == theirs.size()) mine[static_cast<size_t>(a.dim)] = theirs[static_cast<size_t>(a.dim)];
      if (a.dim != b.dim || a.whole != b.whole || mine != theirs)
        throw Error(r.manifest_path() + ": " + r.name(j) + " is sliced otherwise than in " + first.manifest_path(),
                    r.manifest_path());
    }
    // Parts of one save: the same step and data-parallel size.
    for (const char* key : {"world_size", "stage"}) {
      if (r.manifest().value(key, json()) != first.manifest().value(key, json()))
        throw Error(r.manifest_path() + ": " + key + " differs from " + first.manifest_path() + "'s (parts of two saves?)",
                    r.manifest_path());
    }
    if (r.manifest().value("counters", json()) != first.manifest().value("counters", json()))
      throw Error(r.manifest_path() + ": its counters differ from " + first.manifest_path() + "'s (parts of two saves?)",
                  r.manifest_path());
  }
  check_tiling();
}

void CheckpointParts::check_tiling() const {
  // The slices of every split parameter tile it: each starts where the previous part's ends.
  for (int j = 0; j < num_params(); ++j) {
    const SavedSlice& first = slice(0, j);
    if (first.dim < 0) continue;
    int64_t next = 0;
    for (size_t t = 0; t < parts_.size(); ++t) {
      const SavedSlice& s = slice(t, j);
      if (s.start != next)
        throw Error(part(t).manifest_path() + ": " + name(j) + "'s slice starts at " + std::to_string(s.start) +
                        ", not where the previous part's ends (" + std::to_string(next) + ")",
                    part(t).manifest_path());
      next += part(t).shape(j)[static_cast<size_t>(s.dim)];
    }
    if (next != first.whole)
      throw Error(manifest_path() + ": the slices of " + name(j) + " cover " + std::to_string(next) + " of " +
                      std::to_string(first.whole),
                  manifest_path());
  }
}


bool CheckpointParts::has_kind(const std::string& kind) const {
  for (const Part& p : parts_)
    if (p.reader->kind(kind) < 0) return false;
  return true;
}

std::vector<int64_t> CheckpointParts::shape(int param) const {
  std::vector<int64_t> shape = part(0).shape(param);
  const SavedSlice& s = slice(0, param);
  if (s.dim >= 0) shape[static_cast<size_t>(s.dim)] = s.whole;
  return shape;
}

int64_t CheckpointParts::numel(int param) const {
  int64_t n = 1;
  for (int64_t d : shape(param)) n *= d;
  return n;
}

void CheckpointParts::read_whole(int param, const std::string& kind, float* out) {
  const SavedSlice& first = slice(0, param);
  if (first.dim < 0) {
    part(0).read(param, part(0).kind(kind), 0, part(0).numel(param), out);
    return;
  }
  // Row-major: the slices interleave in runs of (their length × the inner dimensions' size), once
  // per index of the outer dimensions.
  const std::vector<int64_t> whole = shape(param);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < static_cast<int>(whole.size()); ++d) {
    if (d < first.dim) outer *= whole[static_cast<size_t>(d)];
    if (d > first.dim) inner *= whole[static_cast<size_t>(d)];
  }
  std::vector<float> values;
  for (size_t t = 0; t < parts_.size(); ++t) {
    CheckpointReader& r = part(t);
    const int64_t length = r.shape(param)[static_cast<size_t>(first.dim)], start = slice(t, param).start;
    values.resize(static_cast<size_t>(r.numel(param)));
    r.read(param, r.kind(kind), 0, r.numel(param), values.data());
    for (int64_t o = 0; o < outer; ++o)
      std::copy_n(values.data() + o * length * inner, length * inner, out + (o * first.whole + start) * inner);
  }
}

StagedCheckpoint::StagedCheckpoint(const std::string& dir, const std::string& requested) {
  const std::string tag = requested.empty() ? trimmed(read_text_file((fs::path(dir) / "latest").string()))
                                            : requested;
  check_tag(tag);
  std::vector<int> sizes;  // p of every DIR/pipeline_0_of_<p> holding the tag (plainly or in parts)
  std::error_code ec;
  int seen = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end && seen < 100000; it.increment(ec), ++seen) {
    const std::string name = it->path().filename().string(), prefix = "pipeline_0_of_";
    if (name.rfind(prefix, 0) != 0 || name.size() > prefix.size() + 4) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits[0] == '0') continue;
    if (fs::exists(it->path() / "latest", ec)) sizes.push_back(std::stoi(digits));
  }
  auto index_parameters = [&] {
    std::set<std::string> seen_names;
    for (size_t s = 0; s < stages_.size(); ++s) {
      for (int j = 0; j < stages_[s]->num_params(); ++j) {
        if (!seen_names.insert(stages_[s]->name(j)).second)
          throw Error(stages_[s]->manifest_path() + ": parameter " + stages_[s]->name(j) + " is held by another stage too",
                      stages_[s]->manifest_path());
        where_.emplace_back(static_cast<int>(s), j);
      }
    }
  };
  if (sizes.empty()) {  // saved without stages
    stages_.push_back(std::make_unique<CheckpointParts>(dir, tag));
    index_parameters();
    return;
  }
  if (sizes.size() > 1)
    throw Error(dir + ": checkpoints are saved there at " + std::to_string(sizes[0]) + " and " +
                    std::to_string(sizes[1]) + " pipeline stages: remove one",
                dir);
  for (int s = 0; s < sizes[0]; ++s) {
    stages_.push_back(std::make_unique<CheckpointParts>(pipeline_root(dir, s, sizes[0]), tag));
    const CheckpointParts& mine = *stages_.back();
    const CheckpointParts& first = *stages_.front();
    if (mine.manifest().value("counters", json()) != first.manifest().value("counters", json()))
      throw Error(mine.manifest_path() + ": its counters differ from " + first.manifest_path() +
                      "'s (stages of two saves?)",
                  mine.manifest_path());
  }
  index_parameters();
}

std::pair<int, int> StagedCheckpoint::find_in_stage(const std::string& name) const {
  for (size_t s = 0; s < stages_.size(); ++s) {
    const int j = stages_[s]->find(name);
    if (j >= 0) return {static_cast<int>(s), j};
  }
  return {-1, -1};
}

std::pair<CheckpointParts*, int> StagedCheckpoint::at(int param) const {
  if (param < 0 || param >= num_params())
    throw Error(manifest_path() + ": no parameter " + std::to_string(param), manifest_path());
  const auto [stage, index] = where_[static_cast<size_t>(param)];
  return {stages_[static_cast<size_t>(stage)].get(), index};
}

const std::string& StagedCheckpoint::name(int param) const {
  const auto [stage, index] = at(param);
  return stage->name(index);
}

int StagedCheckpoint::find(const std::string& name) const {
  const auto [stage, index] = find_in_stage(name);
  if (stage < 0) return -1;
  return static_cast<int>(std::find(where_.begin(), where_.end(), std::pair{stage, index}) - where_.begin());
}

bool StagedCheckpoint::has_kind(const std::string& kind) const {
  return std::all_of(stages_.begin(), stages_.end(), [&](const auto& stage) { return stage->has_kind(kind); });
}

std::vector<int64_t> StagedCheckpoint::shape(int param) const {
  const auto [stage, index] = at(param);
  return stage->shape(index);
}

int64_t StagedCheckpoint::numel(int param) const {
  const auto [stage, index] = at(param);
  return stage->numel(index);
}

void StagedCheckpoint::read_whole(int param, const std::string& kind, float* out) {
  const auto [stage, index] = at(param);
  stage->read_whole(index, kind, out);
}

std::vector<std::string> StagedCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& stage : stages_)
    for (int j = 0; j < stage->num_params(); ++j) out.push_back(stage->name(j));
  return out;
}

}  // namespace zero::checkpoint
