#include "offload/swap_file.h"

#include <fcntl.h>
#include <liburing.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <unordered_map>

#include "offload/swap_cipher.h"
#include "zero/config.h"
#include "zero/error.h"

namespace zero::offload {
namespace {

std::string errno_text(int code) { return std::strerror(code); }

// Nanoseconds blocked, for io_wait_seconds().
std::atomic<int64_t> read_wait_ns{0}, write_wait_ns{0};

}  // namespace

IoWaitSeconds io_wait_seconds() {
  return {.read = static_cast<double>(read_wait_ns.load()) * 1e-9,
          .write = static_cast<double>(write_wait_ns.load()) * 1e-9};
}

AioOptions aio_options(const Config& config) {
  return {.block_size = config.aio.block_size,
          .queue_depth = config.aio.queue_depth,
          .single_submit = config.aio.single_submit,
          .encrypt = config.encrypt_swap};
}

void* map_pages(int64_t bytes) {
  void* p = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw Error("cannot map an aligned I/O buffer of " + std::to_string(bytes) + " bytes");
  return p;
}

void unmap_pages(void* p, int64_t bytes) {
  if (p != nullptr) ::munmap(p, static_cast<size_t>(bytes));
}

AlignedBuffer::AlignedBuffer(int64_t bytes) : bytes_(bytes), mapped_(std::max(kIoAlignment, io_align_up(bytes))) {
  data_ = map_pages(mapped_);  // zero-filled by the kernel
}
AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_), mapped_(other.mapped_) {
  other.data_ = nullptr;
  other.bytes_ = other.mapped_ = 0;
}
AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
  std::swap(mapped_, other.mapped_);
  return *this;
}
AlignedBuffer::~AlignedBuffer() { unmap_pages(data_, mapped_); }

struct SwapFile::Ring {
  io_uring ring{};
  std::unordered_map<uint64_t, Piece> pieces;  // in flight, by id
  uint64_t next_id = 1;
};

struct SwapFile::Staging {
  AlignedBuffer buffer;
  std::vector<SwapCipher::PageSeal> seals;  // of the pages the buffer holds
};

SwapFile::SwapFile(std::string path, int64_t bytes, const AioOptions& options)
    : ring_(std::make_unique<Ring>()), path_(std::move(path)), size_(bytes), options_(options) {
  if (options_.block_size < kIoAlignment || options_.block_size % kIoAlignment != 0)
    throw Error("aio.block_size must be a positive multiple of " + std::to_string(kIoAlignment) + ", got " +
                    std::to_string(options_.block_size),
                "aio.block_size");
  if (options_.queue_depth < 1) throw Error("aio.queue_depth must be at least 1", "aio.queue_depth");
  if (options_.encrypt) cipher_ = std::make_unique<SwapCipher>(bytes);  // before the file: nothing to undo
  const int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
  if (options_.direct) {
    fd_ = ::open(path_.c_str(), flags | O_DIRECT, 0600);
    if (fd_ < 0 && errno == EINVAL)
      warning_ = path_ + ": the filesystem refuses O_DIRECT; swapping through the page cache";
    direct_ = fd_ >= 0;
  }
  if (fd_ < 0 && (!options_.direct || errno == EINVAL)) fd_ = ::open(path_.c_str(), flags, 0600);
  if (fd_ < 0) throw Error(path_ + ": cannot create the swap file: " + errno_text(errno), path_);
  // Reserve the blocks now: running out of space is an error here, not in the middle of a step.
  const int code = posix_fallocate(fd_, 0, bytes);
  if (code != 0 && !(code == EOPNOTSUPP && ::ftruncate(fd_, bytes) == 0)) {
    ::close(fd_);
    ::unlink(path_.c_str());
    throw Error(path_ + ": cannot reserve " + std::to_string(bytes) + " bytes: " + errno_text(code), path_);
  }
  const int ring = io_uring_queue_init(static_cast<unsigned>(options_.queue_depth), &ring_->ring, 0);
  if (ring < 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
    throw Error(path_ + ": io_uring is not available: " + errno_text(-ring), path_);
  }
  // The swap holds the model's weights and optimizer state (the seed's security note): its name
  // goes at once, and the blocks live only as long as this descriptor. A rank killed with
  // SIGKILL leaves nothing of them on disk; the kernel frees them when the process ends.
  ::unlink(path_.c_str());
}

SwapFile::~SwapFile() {
  try {
    wait_all();
  } catch (const std::exception&) {  // the error was the caller's to see; the file goes anyway
  }
  io_uring_queue_exit(&ring_->ring);
  ::close(fd_);  // the last reference: the blocks go (the name went when it was opened)
}

void SwapFile::check_request(int64_t offset, const void* buffer, int64_t bytes) const {
  const auto address = reinterpret_cast<uintptr_t>(buffer);
  if (offset < 0 || bytes < 0 || offset + bytes > size_ || offset % kIoAlignment != 0 || bytes % kIoAlignment != 0 ||
      address % kIoAlignment != 0) {
    throw Error(path_ + ": an I/O request of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                    " is outside the file (" + std::to_string(size_) + " bytes) or not aligned to " +
                    std::to_string(kIoAlignment),
                path_);
  }
}

IoTicket SwapFile::read(int64_t offset, void* buffer, int64_t bytes) {
  check_request(offset, buffer, bytes);
  return submit(false, offset, static_cast<char*>(buffer), bytes);
}

IoTicket SwapFile::write(int64_t offset, const void* buffer, int64_t bytes) {
  check_request(offset, buffer, bytes);
  return submit(true, offset, static_cast<char*>(const_cast<void*>(buffer)), bytes);
}

IoTicket SwapFile::submit(bool write, int64_t offset, char* buffer, int64_t bytes) {
  const IoTicket ticket = next_ticket_++;
  int64_t pieces = 0;
  for (int64_t done = 0; done < bytes; done += options_.block_size, ++pieces) {
    queued_.push_back({write, offset + done, std::min(options_.block_size, bytes - done), buffer + done, ticket});
  }
  pieces_left_.push_back(pieces);
  ticket_writes_.push_back(write);
  pump();
  if (pieces == 0) reap(false);  // an empty request is complete at once
  return ticket;
}

void SwapFile::make_staging() {
  std::vector<Staging> pool;  // all or nothing: a failed mapping leaves no half-made pool
  for (int64_t i = 0; i < options_.queue_depth; ++i)
    pool.push_back({AlignedBuffer(options_.block_size),
                    std::vector<SwapCipher::PageSeal>(static_cast<size_t>(options_.block_size / kIoAlignment))});
  staging_ = std::move(pool);
  for (int64_t i = 0; i < options_.queue_depth; ++i) free_staging_.push_back(static_cast<int>(i));
}

void SwapFile::pump() {
  int prepared = 0;
  while (!queued_.empty() && in_flight_ < options_.queue_depth) {
    Piece piece = queued_.front();
    char* source = piece.buffer;
    if (piece.write && cipher_) {
      // Sealed before anything is taken, so that a throw leaves the piece queued. A free buffer
      // exists: each piece in flight holds at most one, and fewer than queue_depth are in flight.
      if (staging_.empty()) make_staging();
      const int slot = free_staging_.back();
      Staging& staging = staging_[static_cast<size_t>(slot)];
      source = static_cast<char*>(staging.buffer.data());
      cipher_->seal(piece.offset, piece.buffer, source, piece.bytes, staging.seals.data());
      piece.staging = slot;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
    if (sqe == nullptr) break;  // (an encrypted piece is sealed again, with new nonces, next time)
    if (piece.staging >= 0) free_staging_.pop_back();
    queued_.pop_front();
    if (piece.write) {
      io_uring_prep_write(sqe, fd_, source, static_cast<unsigned>(piece.bytes), static_cast<uint64_t>(piece.offset));
    } else {
      io_uring_prep_read(sqe, fd_, source, static_cast<unsigned>(piece.bytes), static_cast<uint64_t>(piece.offset));
    }
    const uint64_t id = ring_->next_id++;
    io_uring_sqe_set_data64(sqe, id);
    ring_->pieces.emplace(id, piece);
    ++in_flight_;
    ++prepared;
    // An encrypted piece goes to the device at once: the next one is sealed while it is written.
    if (options_.single_submit || piece.staging >= 0) {
      io_uring_submit(&ring_->ring);
      prepared = 0;
    }
  }
  if (prepared > 0 && !options_.single_submit) io_uring_submit(&ring_->ring);
}

void SwapFile::reap(bool block) {
  io_uring_cqe* cqe = nullptr;
  if (block && in_flight_ > 0) {
    const int code = io_uring_wait_cqe(&ring_->ring, &cqe);
    if (code < 0 && code != -EINTR) throw Error(path_ + ": waiting for I/O failed: " + errno_text(-code), path_);
  }
  while (io_uring_peek_cqe(&ring_->ring, &cqe) == 0 && cqe != nullptr) {
    const uint64_t id = io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_->ring, cqe);
    auto it = ring_->pieces.find(id);
    const Piece piece = it->second;
    ring_->pieces.erase(it);
    --in_flight_;
    if (res < 0) {
      if (error_.empty())
        error_ = path_ + ": " + (piece.write ? "write" : "read") + " of " + std::to_string(piece.bytes) +
                 " bytes at offset " + std::to_string(piece.offset) + " failed: " + errno_text(-res);
    } else if (res != piece.bytes) {
      if (error_.empty())
        error_ = path_ + ": short " + (piece.write ? "write" : "read") + " (" + std::to_string(res) + " of " +
                 std::to_string(piece.bytes) + " bytes at offset " + std::to_string(piece.offset) + ")";
    } else {
      (piece.write ? bytes_written_ : bytes_read_) += piece.bytes;
      if (piece.write && cipher_) {
        cipher_->commit(piece.offset, staging_[static_cast<size_t>(piece.staging)].seals.data(), piece.bytes);
      } else if (cipher_) {
        try {
          const int64_t forged = cipher_->open(piece.offset, piece.buffer, piece.bytes);
          if (forged >= 0 && error_.empty())
            error_ = path_ + ": the " + std::to_string(SwapCipher::kPageBytes) + " bytes at offset " +
                     std::to_string(forged) + " fail authentication (AES-256-GCM, encrypt_swap): the swap file was " +
                     "changed on disk";
        } catch (const Error& e) {
          if (error_.empty()) error_ = path_ + ": " + e.what();
        }
      }
    }
    if (piece.staging >= 0) free_staging_.push_back(piece.staging);
    --pieces_left_[static_cast<size_t>(piece.ticket - first_open_)];
    pump();  // refill the slot at once: the device never waits for the next piece
  }
  while (!pieces_left_.empty() && pieces_left_.front() == 0) {
    pieces_left_.erase(pieces_left_.begin());
    ticket_writes_.erase(ticket_writes_.begin());
    ++first_open_;
  }
}

void SwapFile::wait(IoTicket ticket) {
  if (first_open_ <= ticket && first_open_ < next_ticket_) {
    const bool write = ticket_writes_[static_cast<size_t>(std::min(ticket, next_ticket_ - 1) - first_open_)];
    const auto start = std::chrono::steady_clock::now();
    while (first_open_ <= ticket && first_open_ < next_ticket_) {
      pump();
      reap(true);
    }
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    (write ? write_wait_ns : read_wait_ns) += ns;
  }
  if (!error_.empty()) {
    const std::string message = error_;
    error_.clear();
    throw Error(message, path_);
  }
}

void SwapFile::wait_all() { wait(next_ticket_ - 1); }

SwapFolder::SwapFolder(const std::string& dir, int rank) {
  namespace fs = std::filesystem;
  static constexpr std::string_view kPrefix = "zerocpp-swap-";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + kPrefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) fs::remove_all(entry.path(), ec);
  }
  static std::atomic<int> made{0};  // several engines (or swaps) in one process
  const fs::path folder = fs::path(dir) / (std::string(kPrefix) + std::to_string(::getpid()) + "." +
                                           std::to_string(made++) + ".rank" + std::to_string(rank));
  fs::create_directories(folder);
  fs::permissions(folder, fs::perms::owner_all, fs::perm_options::replace, ec);  // 0700: this user's only
  path_ = folder.string();
}

SwapFolder::~SwapFolder() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void check_swap_dir(const std::string& dir, int64_t needed, const std::string& key) {
  struct stat info {};
  if (dir.empty()) throw Error(key + " is empty: NVMe offload needs a directory", key);
  if (::stat(dir.c_str(), &info) != 0)
    throw Error(key + ": " + dir + " does not exist (" + errno_text(errno) + ")", key);
  if (!S_ISDIR(info.st_mode)) throw Error(key + ": " + dir + " is not a directory", key);
  // Writable, as the swap files will be (access() says yes to root even on a read-only mount).
  const std::string probe = dir + "/.zerocpp-write-probe-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(key + ": cannot write in " + dir + " (" + errno_text(errno) + ")", key);
  ::close(fd);
  ::unlink(probe.c_str());
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) throw Error(key + ": cannot read the free space of " + dir, key);
  const auto available = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  if (available < needed) {
    throw Error(key + ": the swap files need " + std::to_string(needed) + " bytes but " + dir + " has " +
                    std::to_string(available) + " bytes free",
                key);
  }
}

}  // namespace zero::offload
