// File plumbing of checkpoints (torch-free): hashed writes with fsync, verified reads, atomic
// renames. Every error is a zero::Error naming the path.
#pragma once

#include <cstdint>
#include <string>

namespace zero::checkpoint {

struct FileDigest {
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;  // XXH3-64 of the whole file
};

// Writes a new file, hashing what passes through; finish() fsyncs and closes it.
class HashingWriter {
 public:
  explicit HashingWriter(std::string path);
  ~HashingWriter();
  HashingWriter(const HashingWriter&) = delete;
  HashingWriter& operator=(const HashingWriter&) = delete;
  void write(const void* data, uint64_t bytes);
  FileDigest finish();

 private:
  std::string path_;
  int fd_ = -1;
  void* state_ = nullptr;  // XXH3_state_t
  uint64_t bytes_ = 0;
};

FileDigest digest_file(const std::string& path);
std::string hex(uint64_t value);

// Reads `bytes` at `offset` of an open file; an error naming the path when the file is short.
void read_at(int fd, const std::string& path, uint64_t offset, void* out, uint64_t bytes);

// Text written to path.partial, fsynced, renamed over path, and the directory fsynced.
void write_file_atomically(const std::string& path, const std::string& text);
std::string read_text_file(const std::string& path);
void fsync_directory(const std::string& path);

}  // namespace zero::checkpoint
