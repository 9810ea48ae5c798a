// A safetensors writer (torch-free), exactly per the format's specification: an 8-byte
// little-endian header length N, N bytes of JSON — per tensor {"dtype", "shape", "data_offsets":
// [begin, end]} relative to the data that follows, plus "__metadata__" (string to string) —
// padded with spaces so the data starts 8-byte aligned, then the tensors' bytes back to back.
// Tensors are appended in the order given, so a model can be streamed out tensor by tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zero::checkpoint {

class HashingWriter;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};

class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<SafetensorsEntry> entries,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  // The next tensor's bytes, in the order of `entries` (its size is checked).
  void append(const void* data, uint64_t bytes);
  // Every tensor written: fsyncs, closes, and renames PATH.partial (where the writing goes) to
  // PATH. A writer destroyed before finish() removes PATH.partial and leaves PATH as it was.
  void finish();

 private:
  bool finished_ = false;
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  size_t next_ = 0;
  std::unique_ptr<HashingWriter> out_;
};

// The JSON header as written (for tests and tools): entries laid out in order from offset 0.
std::string safetensors_header(const std::vector<SafetensorsEntry>& entries,
                               const std::map<std::string, std::string>& metadata);

}  // namespace zero::checkpoint
