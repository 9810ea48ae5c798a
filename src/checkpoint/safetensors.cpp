#include "checkpoint/safetensors.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "checkpoint/files.h"
#include "zero/error.h"

namespace zero::checkpoint {

std::string safetensors_header(const std::vector<SafetensorsEntry>& entries,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& e : entries) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes}}};
    offset += e.bytes;
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // the data begins 8-byte aligned
  return text;
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<SafetensorsEntry> entries,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), entries_(std::move(entries)), out_(std::make_unique<HashingWriter>(path + ".partial")) {
  const std::string header = safetensors_header(entries_, metadata);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  out_->write(length, 8);
  out_->write(header.data(), header.size());
}

// Unfinished (an error on the way): the partial file goes, and whatever `path` held stays.
SafetensorsWriter::~SafetensorsWriter() {
  if (finished_) return;
  out_.reset();
  std::remove((path_ + ".partial").c_str());
}

void SafetensorsWriter::append(const void* data, uint64_t bytes) {
  if (next_ >= entries_.size() || entries_[next_].bytes != bytes) {
    throw Error(path_ + ": tensor " + (next_ < entries_.size() ? entries_[next_].name : "(none left)") + " expects " +
                    (next_ < entries_.size() ? std::to_string(entries_[next_].bytes) : "0") + " bytes, got " +
                    std::to_string(bytes),
                path_);
  }
  out_->write(data, bytes);
  ++next_;
}

void SafetensorsWriter::finish() {
  if (next_ != entries_.size())
    throw Error(path_ + ": " + std::to_string(entries_.size() - next_) + " tensors were never written", path_);
  out_->finish();
  // Complete and on disk: only now does it take the name (a reader never sees half a file).
  if (std::rename((path_ + ".partial").c_str(), path_.c_str()) != 0)
    throw Error(path_ + ": cannot rename " + path_ + ".partial to it", path_);
  finished_ = true;
}

}  // namespace zero::checkpoint
