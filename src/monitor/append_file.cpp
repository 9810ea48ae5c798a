#include "monitor/append_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

#include "zero/error.h"

namespace zero::monitor {
namespace {

[[noreturn]] void fail(std::string_view what, const std::filesystem::path& path, int error) {
  throw Error("monitor: cannot " + std::string(what) + " '" + path.string() + "': " + std::strerror(error),
              path.string());
}

// 0666 before the umask, as Python's open() creates files.
int open_file(const std::filesystem::path& path, int extra_flags) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | extra_flags, 0666);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

}  // namespace

AppendFile AppendFile::open_or_create(const std::filesystem::path& path) {
  int fd = open_file(path, 0);
  if (fd < 0) fail("open", path, errno);
  return AppendFile(fd, path);
}

std::optional<AppendFile> AppendFile::create_new(const std::filesystem::path& path) {
  int fd = open_file(path, O_EXCL);
  if (fd < 0 && errno == EEXIST) return std::nullopt;
  if (fd < 0) fail("create", path, errno);
  return AppendFile(fd, path);
}

AppendFile::AppendFile(AppendFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

AppendFile& AppendFile::operator=(AppendFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::append(std::string_view bytes) {
  if (fd_ < 0) fail("write (closed)", path_, EBADF);
  while (!bytes.empty()) {
    ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write", path_, errno);
    if (n == 0) fail("write", path_, EIO);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

void AppendFile::close() {
  int fd = std::exchange(fd_, -1);
  // Note: no retry on EINTR; Linux frees the descriptor even then, and a retry could close
  // another thread's file.
  if (fd >= 0 && ::close(fd) != 0 && errno != EINTR) fail("close", path_, errno);
}

void create_log_dir(const std::filesystem::path& dir, std::string_view block) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw Error(std::string(block) + ": cannot create the log directory '" + dir.string() + "': " + ec.message(),
                dir.string());
  }
}

}  // namespace zero::monitor
