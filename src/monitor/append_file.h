// AppendFile — a file opened for appending, whose every failure is a zero::Error naming the path.
//
// Note: each append() is a write(2) loop straight to the kernel, with no user-space buffer, so
// what write_events wrote is visible to readers as soon as it returns (DeepSpeed flushes after
// every batch for the same reason). No fsync: a crash of the machine may lose the last batches.
#pragma once

#include <filesystem>
#include <optional>
#include <string_view>

namespace zero::monitor {

class AppendFile {
 public:
  static AppendFile open_or_create(const std::filesystem::path& path);
  // nullopt when `path` exists already (O_EXCL): the caller picks another name.
  static std::optional<AppendFile> create_new(const std::filesystem::path& path);

  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  ~AppendFile();  // closes; use close() to see a failure

  void append(std::string_view bytes);
  void close();
  const std::filesystem::path& path() const { return path_; }

 private:
  AppendFile(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::filesystem::path path_;
};

// Creates `dir` and its parents; `block` ("csv_monitor", "tensorboard") goes into the message.
void create_log_dir(const std::filesystem::path& dir, std::string_view block);

}  // namespace zero::monitor
