// Safetensors in (torch-free): a file memory-mapped and its header checked as the format's
// specification and Hugging Face's `safetensors` library check it, and a model directory of one
// file or of shards named by `model.safetensors.index.json`.
//
// Nothing is read but the header until a tensor's bytes are asked for: a rank that takes one
// layer's tensors touches only their pages (the kernel pages them in and may drop them again).
// Every problem is a zero::Error naming the file and, where there is one, the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zero::checkpoint {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", "F16", ... as the header says
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets in the data section
  int64_t numel() const;
};

// Bytes per element of a safetensors dtype name; 0 for one the format does not define.
int safetensors_dtype_size(const std::string& dtype);

class SafetensorsFile {
 public:
  // Maps `path` read-only and checks: the 8-byte header length within the file, the header a JSON
  // object of tensors {dtype, shape, data_offsets} (plus "__metadata__", strings only), each
  // dtype known, each size prod(shape)·element size, the offsets tiling the data section exactly
  // (no gap, no overlap, nothing past the end: a truncated file is caught here).
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsTensor* find(const std::string& name) const;  // nullptr when absent
  // The tensor's bytes in the mapping (valid while this object lives).
  const void* data(const SafetensorsTensor& tensor) const;
  // Drops the tensor's pages from this process (they stay in the page cache): a rank that reads
  // every layer in turn keeps no more of the file resident than the layer it is reading.
  void release(const SafetensorsTensor& tensor) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  uint64_t map_bytes_ = 0, data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face model directory's weights: DIR/model.safetensors, or the shards that
// DIR/model.safetensors.index.json maps every tensor to. The index is checked both ways: each
// file it names exists and holds the tensors it is said to, and each shard's tensors are all in
// the index.
class SafetensorsModel {
 public:
  explicit SafetensorsModel(const std::string& dir);
  ~SafetensorsModel();

  struct Found {
    const SafetensorsFile* file;
    const SafetensorsTensor* tensor;
  };
  Found find(const std::string& name) const;  // file == nullptr when absent
  std::vector<std::string> names() const;      // every tensor, sorted
  const std::string& dir() const { return dir_; }
  bool sharded() const { return sharded_; }
  uint64_t total_bytes() const;  // of all tensors' data

 private:
  std::string dir_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> file_of_;  // tensor name → index in files_
};

}  // namespace zero::checkpoint
