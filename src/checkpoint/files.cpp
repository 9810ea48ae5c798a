#include "checkpoint/files.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "zero/error.h"

namespace zero::checkpoint {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(path + ": " + what + ": " + std::strerror(errno), path);
}

}  // namespace

HashingWriter::HashingWriter(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(path_, "cannot create the file");
  state_ = XXH3_createState();
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

HashingWriter::~HashingWriter() {
  if (fd_ >= 0) ::close(fd_);
  XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

void HashingWriter::write(const void* data, uint64_t bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, bytes);
  const char* p = static_cast<const char*>(data);
  for (uint64_t left = bytes; left > 0;) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(path_, "write failed");
    p += n;
    left -= static_cast<uint64_t>(n);
  }
  bytes_ += bytes;
}

FileDigest HashingWriter::finish() {
  if (::fsync(fd_) != 0) fail(path_, "fsync failed");
  if (::close(fd_) != 0) fail(path_, "close failed");
  fd_ = -1;
  return {bytes_, XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_))};
}

namespace {

// A descriptor opened with O_NONBLOCK (so that opening a FIFO returns at once) becomes a plain
// blocking one for a regular file; anything else is closed and refused.
int keep_if_regular(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    fail(path, "cannot read its status");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* what = S_ISDIR(st.st_mode)   ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                       : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                                    : "not a regular file";
    throw Error(path + ": is " + std::string(what) + ", not a regular file", path);
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

}  // namespace

int open_regular_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) fail(path, "cannot open the file");
  return keep_if_regular(fd, path);
}

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

int open_file_in(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  if (!is_plain_file_name(name)) {
    throw Error(path + ": \"" + name + "\" is not a file name inside " + dir +
                    " (a path, \"..\" or empty): a checkpoint names only its own files",
                path);
  }
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) fail(dir, "cannot open the directory");
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW);
  const int saved = errno;
  ::close(dir_fd);
  if (fd < 0 && saved == ELOOP) {
    throw Error(path + ": is a symbolic link: a checkpoint's files are regular files inside it", path);
  }
  errno = saved;
  if (fd < 0) fail(path, "cannot open the file");
  return keep_if_regular(fd, path);
}

FileDigest digest_file(const std::string& path) {
  const int fd = open_regular_file(path);
  try {
    const FileDigest digest = digest_descriptor(fd, path);
    ::close(fd);
    return digest;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

FileDigest digest_descriptor(int fd, const std::string& path) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> buffer(1 << 20);
  uint64_t bytes = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buffer.data(), buffer.size(), static_cast<off_t>(bytes));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      XXH3_freeState(state);
      fail(path, "read failed");
    }
    if (n == 0) break;
    XXH3_64bits_update(state, buffer.data(), static_cast<size_t>(n));
    bytes += static_cast<uint64_t>(n);
  }
  const FileDigest digest{bytes, XXH3_64bits_digest(state)};
  XXH3_freeState(state);
  return digest;
}

std::string hex(uint64_t value) { return fmt::format("{:016x}", value); }

void read_at(int fd, const std::string& path, uint64_t offset, void* out, uint64_t bytes) {
  char* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "read failed");
    if (n == 0) throw Error(path + ": file ends before byte " + std::to_string(offset + bytes), path);
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<uint64_t>(n);
  }
}

void fsync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open the directory");
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail(path, "fsync of the directory failed");
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string partial = path + ".partial";
  {
    HashingWriter writer(partial);
    writer.write(text.data(), text.size());
    writer.finish();
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) fail(path, "cannot rename " + partial + " to it");
  const auto slash = path.rfind('/');
  fsync_directory(slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash));
}

std::string read_text_file(const std::string& path, uint64_t max_bytes) {
  const int fd = open_regular_file(path);
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      fail(path, "read failed");
    }
    if (n == 0) break;
    if (text.size() + static_cast<uint64_t>(n) > max_bytes) {
      ::close(fd);
      throw Error(path + ": larger than " + std::to_string(max_bytes) + " bytes, the most this text file may hold",
                  path);
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace zero::checkpoint
