#include "checkpoint/safetensors_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/files.h"
#include "util/json_from_file.h"
#include "zero/error.h"

namespace zero::checkpoint {
namespace {

// The safetensors library refuses headers above 100 MB; a length beyond that is a corrupt file,
// not a big model.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void bad_file(const std::string& path, const std::string& what, const std::string& tensor = {}) {
  throw Error(path + ": " + (tensor.empty() ? "" : "tensor " + tensor + ": ") + what, tensor.empty() ? path : tensor);
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, int> sizes = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2},    {"I64", 8},
                                                   {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},      {"BOOL", 1},
                                                   {"U16", 2}, {"U32", 4}, {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad_file(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    bad_file(path, std::string("cannot stat: ") + std::strerror(errno));
  }
  map_bytes_ = static_cast<uint64_t>(st.st_size);
  if (map_bytes_ < 8) {
    ::close(fd);
    bad_file(path, "truncated: " + std::to_string(map_bytes_) + " bytes, not even the 8-byte header length");
  }
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    bad_file(path, std::string("cannot map: ") + std::strerror(errno));
  }
  const auto* bytes = static_cast<const unsigned char*>(map_);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | bytes[i];  // little-endian
  if (header_bytes > kMaxHeaderBytes || header_bytes > map_bytes_ - 8) {
    bad_file(path, "bad header: its length field says " + std::to_string(header_bytes) + " bytes, the file has " +
                       std::to_string(map_bytes_ - 8) + " after it (truncated or not safetensors)");
  }
  data_offset_ = 8 + header_bytes;
  nlohmann::json header;
  try {
    header = parse_json_from(reinterpret_cast<const char*>(bytes) + 8,
                             reinterpret_cast<const char*>(bytes) + data_offset_, path);
  } catch (const nlohmann::json::exception& e) {
    bad_file(path, std::string("bad header: not JSON (") + e.what() + ")");
  }
  if (!header.is_object()) bad_file(path, "bad header: not a JSON object");
  const uint64_t data_bytes = map_bytes_ - data_offset_;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad_file(path, "bad header: __metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) bad_file(path, "bad header: __metadata__." + key + " is not a string");
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    SafetensorsTensor t;
    t.name = name;
    try {
      t.dtype = entry.at("dtype").get<std::string>();
      // Integers in range, or an error (nlohmann converts a double out of range: undefined).
      if (!json_to(entry.at("shape"), t.shape)) bad_file(path, "shape is not a list of integers", name);
      std::vector<uint64_t> offsets;
      if (!json_to(entry.at("data_offsets"), offsets)) bad_file(path, "data_offsets is not a list of integers", name);
      if (offsets.size() != 2) bad_file(path, "data_offsets must be [begin, end]", name);
      t.begin = offsets[0];
      t.end = offsets[1];
    } catch (const nlohmann::json::exception& e) {
      bad_file(path, std::string("bad header entry (") + e.what() + ")", name);
    }
    const int element = safetensors_dtype_size(t.dtype);
    if (element == 0) bad_file(path, "unknown dtype " + t.dtype, name);
    for (int64_t d : t.shape)
      if (d < 0) bad_file(path, "negative dimension in its shape", name);
    if (t.end < t.begin || t.end - t.begin != static_cast<uint64_t>(t.numel()) * static_cast<uint64_t>(element)) {
      bad_file(path,
               "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ") do not hold " +
                   std::to_string(t.numel()) + " elements of " + t.dtype,
               name);
    }
    if (t.end > data_bytes) {
      bad_file(path,
               "truncated: its data ends at byte " + std::to_string(t.end) + " of the data section, which has " +
                   std::to_string(data_bytes),
               name);
    }
    tensors_.push_back(std::move(t));
  }
  // The tensors tile the data section, as the safetensors library demands: no gap, no overlap.
  std::vector<const SafetensorsTensor*> by_offset;
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return std::tie(a->begin, a->end) < std::tie(b->begin, b->end); });
  uint64_t next = 0;
  for (const auto* t : by_offset) {
    if (t->begin != next) bad_file(path, "bad header: data_offsets leave a gap or overlap before it", t->name);
    next = t->end;
  }
  if (next != data_bytes) {
    bad_file(path, "bad header: the tensors cover " + std::to_string(next) + " bytes of a data section of " +
                       std::to_string(data_bytes));
  }
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_[tensors_[i].name] = i;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const void* SafetensorsFile::data(const SafetensorsTensor& tensor) const {
  return static_cast<const char*>(map_) + data_offset_ + tensor.begin;
}

void SafetensorsFile::release(const SafetensorsTensor& tensor) const {
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = (data_offset_ + tensor.begin) / page * page;
  const uint64_t end = std::min(map_bytes_, (data_offset_ + tensor.end + page - 1) / page * page);
  if (end > begin) ::madvise(static_cast<char*>(map_) + begin, end - begin, MADV_DONTNEED);
}

SafetensorsModel::SafetensorsModel(const std::string& dir) : dir_(dir) {
  namespace fs = std::filesystem;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    sharded_ = true;
    nlohmann::json index;
    try {
      index = parse_json_from(read_text_file(index_path.string()), index_path.string());
    } catch (const nlohmann::json::exception& e) {
      bad_file(index_path.string(), std::string("not JSON (") + e.what() + ")");
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      bad_file(index_path.string(), "no \"weight_map\" object");
    std::map<std::string, size_t> file_index;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string()) bad_file(index_path.string(), "weight_map." + name + " is not a file name");
      const std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos || f == ".." || f.empty())
        bad_file(index_path.string(), "weight_map." + name + " names " + f + ", not a file beside the index");
      if (!file_index.contains(f)) {
        const fs::path shard = fs::path(dir) / f;
        if (!fs::exists(shard))
          bad_file(index_path.string(), "weight_map names a missing shard " + shard.string(), name);
        file_index[f] = files_.size();
        files_.push_back(std::make_unique<SafetensorsFile>(shard.string()));
      }
      const size_t i = file_index[f];
      if (!files_[i]->find(name))
        bad_file(files_[i]->path(), "the index maps it here, but the file does not hold it", name);
      file_of_[name] = i;
    }
    for (const auto& file : files_) {
      for (const auto& t : file->tensors()) {
        if (!file_of_.contains(t.name))
          bad_file(file->path(), "in the shard but not in " + index_path.string(), t.name);
        if (file_of_[t.name] != static_cast<size_t>(&file - files_.data()))
          bad_file(file->path(), "also in another shard than the one the index names", t.name);
      }
    }
    if (files_.empty()) bad_file(index_path.string(), "the weight_map is empty");
  } else if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (const auto& t : files_.front()->tensors()) file_of_[t.name] = 0;
  } else {
    bad_file(dir,
             "no model.safetensors and no model.safetensors.index.json (a .bin / pickle checkpoint is not read: "
             "convert it to safetensors)");
  }
}

SafetensorsModel::~SafetensorsModel() = default;

SafetensorsModel::Found SafetensorsModel::find(const std::string& name) const {
  const auto it = file_of_.find(name);
  if (it == file_of_.end()) return {nullptr, nullptr};
  const SafetensorsFile* f = files_[it->second].get();
  return {f, f->find(name)};
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : file_of_) out.push_back(name);
  return out;
}

uint64_t SafetensorsModel::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, i] : file_of_) {
    const SafetensorsTensor* t = files_[i]->find(name);
    total += t->end - t->begin;
  }
  return total;
}

}  // namespace zero::checkpoint
