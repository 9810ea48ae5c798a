// A Hugging Face model directory out (torch-free): weights as `model.safetensors`, or as shards of
// at most `max_shard_bytes` named `model-00001-of-0000N.safetensors` with
// `model.safetensors.index.json` ({"metadata": {"total_size": bytes}, "weight_map": {name: file}}),
// each file's header metadata {"format": "pt"} (transformers refuses a file without it), plus
// whatever small files the model adds (config.json, tokenizer files).
//
// Tensors stream in one at a time in the order given, so a caller that gathers one layer at a
// time never holds the model. Everything is written under DIR.partial and moved into DIR only by
// finish(): an error or an exception leaves DIR as it was (the staging folder is removed).
// Shards are cut as transformers cuts them: tensors in order, a new shard when the next tensor
// would pass the limit, a tensor bigger than the limit alone in its shard.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"

namespace zero::checkpoint {

struct HfDirectoryPlan {
  std::vector<std::string> files;      // safetensors file names, in order
  std::vector<size_t> first_entry;     // per file: index of its first entry
  std::vector<std::string> file_of;    // per entry: its file
};
// A shard size as transformers' max_shard_size reads it: bytes, or a number with KB/MB/GB (powers
// of 1000) or KiB/MiB/GiB (powers of 1024): "5GB", "500MB", "2GiB". An error naming the text.
uint64_t parse_shard_size(const std::string& text);

// How `entries` split into files under `max_shard_bytes` (0: one file).
HfDirectoryPlan plan_hf_directory(const std::vector<SafetensorsEntry>& entries, uint64_t max_shard_bytes);

class HfDirectoryWriter {
 public:
  // Errors before anything is written when `dir` is a file, or the staging folder cannot be made.
  HfDirectoryWriter(std::string dir, std::vector<SafetensorsEntry> entries, uint64_t max_shard_bytes);
  ~HfDirectoryWriter();  // removes the staging folder unless finished
  HfDirectoryWriter(const HfDirectoryWriter&) = delete;
  HfDirectoryWriter& operator=(const HfDirectoryWriter&) = delete;

  // The next tensor's bytes (checked against its entry).
  void append(const void* data, uint64_t bytes);
  // A small file beside the weights (config.json, a tokenizer file).
  void add_file(const std::string& name, const std::string& text);
  // Writes the index (sharded), then moves every file into DIR; a model file DIR held before that
  // this export does not write (another shard count) is removed so the directory is consistent.
  void finish();
  const HfDirectoryPlan& plan() const { return plan_; }

 private:
  void open_next_file();
  std::string dir_, staging_;
  std::vector<SafetensorsEntry> entries_;
  HfDirectoryPlan plan_;
  size_t next_entry_ = 0, next_file_ = 0;
  std::unique_ptr<SafetensorsWriter> writer_;
  std::vector<std::string> extra_files_;
  bool finished_ = false;
};

}  // namespace zero::checkpoint
