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
// The digest of an open file's whole content, read from offset 0 (its position is left as is).
FileDigest digest_descriptor(int fd, const std::string& path);
std::string hex(uint64_t value);

// Reads `bytes` at `offset` of an open file; an error naming the path when the file is short.
void read_at(int fd, const std::string& path, uint64_t offset, void* out, uint64_t bytes);

// Text written to path.partial, fsynced, renamed over path, and the directory fsynced.
void write_file_atomically(const std::string& path, const std::string& text);
// Files from strangers (docs/checkpoints.md, "Files from elsewhere"). open_regular_file opens
// `path` for reading only when it is a regular file (a symbolic link to one is followed, as a
// Hugging Face cache holds them): a device, a FIFO or a directory is an error naming the path,
// never a read that blocks or never ends. The caller closes the descriptor.
int open_regular_file(const std::string& path);
// The same for `name` inside directory `dir`, which must be one plain file name (no '/', not
// "." or "..") and not a symbolic link: a checkpoint's files are its own, never elsewhere.
int open_file_in(const std::string& dir, const std::string& name);
// Whether `name` is one plain file name (what open_file_in accepts).
bool is_plain_file_name(const std::string& name);
// A whole text file, at most `max_bytes` (an error naming the path beyond it).
inline constexpr uint64_t kMaxTextFileBytes = uint64_t{64} << 20;
std::string read_text_file(const std::string& path, uint64_t max_bytes = kMaxTextFileBytes);
void fsync_directory(const std::string& path);

}  // namespace zero::checkpoint
