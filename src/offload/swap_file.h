// SwapFile — one rank's swap file for NVMe offload (ZeRO-Infinity): asynchronous reads and writes
// through io_uring (liburing), with O_DIRECT so that swapped state bypasses the page cache (else
// the kernel would keep a second copy of what offload moved out of memory). Torch-free.
//
//   SwapFile swap(dir / "optimizer.swap", bytes, options);
//   IoTicket t = swap.write(offset, buffer, n);   // returns at once
//   swap.wait(t);                                 // zero::Error naming the file on failure
//
// Offsets, sizes and buffer addresses are multiples of kIoAlignment (buffers from AlignedBuffer).
// A request is cut into `block_size` pieces and at most `queue_depth` pieces are in flight
// (DeepSpeed's aio block). Where the filesystem refuses O_DIRECT the file is opened buffered,
// with a warning (warning()). The file is created new and sized, and loses its name at once: its
// blocks live only as long as the object (or the process).
// With AioOptions::encrypt every page is written sealed with AES-256-GCM and authenticated when
// read back (SwapCipher): a write is encrypted into a staging buffer of its own as it is
// submitted (at most queue_depth buffers of block_size), a read is decrypted in place as it
// completes, and a page that fails authentication is an error naming the file and the offset.
// As without encryption, a range must not be read while a write of it is in flight.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace zero {
class Config;
}

namespace zero::offload {

class SwapCipher;

inline constexpr int64_t kIoAlignment = 4096;

// `bytes` rounded up (down) to a multiple of kIoAlignment.
constexpr int64_t io_align_up(int64_t bytes) { return (bytes + kIoAlignment - 1) / kIoAlignment * kIoAlignment; }
constexpr int64_t io_align_down(int64_t bytes) { return bytes / kIoAlignment * kIoAlignment; }

struct AioOptions {
  int64_t block_size = 1'048'576;  // bytes per submitted piece
  int64_t queue_depth = 8;         // pieces in flight at most
  bool single_submit = false;      // submit each piece on its own (else in batches)
  bool direct = true;              // false: buffered I/O even where O_DIRECT works (tests)
  bool encrypt = false;            // AES-256-GCM ("zerocpp": {"encrypt_swap": true}; SwapCipher)
};

// A run's swap settings: the aio block's, and zerocpp's encrypt_swap.
AioOptions aio_options(const Config& config);

// Pages of their own for I/O buffers (aligned for O_DIRECT, zero-filled), mapped and unmapped
// directly: from malloc, large short-lived buffers left holes that later allocations split, and
// resident memory grew by a buffer per use (measured while zero::Init spilled a 300 M GPT's units:
// +50 MB per unit). `bytes` is rounded up to whole kIoAlignment pages.
void* map_pages(int64_t bytes);
void unmap_pages(void* p, int64_t bytes);

// Memory aligned for O_DIRECT, zero-filled (map_pages).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t bytes);
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  ~AlignedBuffer();
  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0, mapped_ = 0;
};

using IoTicket = uint64_t;

// Seconds threads spent blocked in SwapFile::wait, over every swap file of the process: waits for
// a read (swap-in) and for a write (swap-out), wall_clock_breakdown's swap timers.
struct IoWaitSeconds {
  double read = 0, write = 0;
};
IoWaitSeconds io_wait_seconds();

class SwapFile {
 public:
  SwapFile(std::string path, int64_t bytes, const AioOptions& options = {});
  ~SwapFile();  // waits for what is in flight, closes and removes the file
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  IoTicket read(int64_t offset, void* buffer, int64_t bytes);
  IoTicket write(int64_t offset, const void* buffer, int64_t bytes);
  void wait(IoTicket ticket);  // until that request (and every earlier one) is complete
  void wait_all();

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }
  bool direct() const { return direct_; }
  bool encrypted() const { return cipher_ != nullptr; }
  const std::string& warning() const { return warning_; }  // why O_DIRECT is off, if it is
  int64_t bytes_read() const { return bytes_read_; }
  int64_t bytes_written() const { return bytes_written_; }

 private:
  struct Piece {
    bool write;
    int64_t offset, bytes;
    char* buffer;
    IoTicket ticket;
    int staging = -1;  // an encrypted write: the staging buffer that holds its ciphertext
  };
  IoTicket submit(bool write, int64_t offset, char* buffer, int64_t bytes);
  void pump();            // submits queued pieces while fewer than queue_depth are in flight
  void reap(bool block);  // collects completions
  void check_request(int64_t offset, const void* buffer, int64_t bytes) const;
  struct Ring;
  std::unique_ptr<Ring> ring_;
  std::string path_;
  int64_t size_;
  AioOptions options_;
  int fd_ = -1;
  bool direct_ = false;
  std::string warning_;
  std::deque<Piece> queued_;
  int64_t in_flight_ = 0;
  IoTicket next_ticket_ = 1;
  std::vector<int64_t> pieces_left_;  // per ticket still open (index ticket - first_open_)
  std::vector<bool> ticket_writes_;   // per ticket still open: a write (else a read)
  IoTicket first_open_ = 1;
  std::string error_;
  int64_t bytes_read_ = 0, bytes_written_ = 0;
  // encrypt: the file's key and page seals, and queue_depth staging buffers of block_size (made
  // at the first write) with the seals of what each holds.
  struct Staging;
  void make_staging();
  std::unique_ptr<SwapCipher> cipher_;
  std::vector<Staging> staging_;
  std::vector<int> free_staging_;
};

// A folder of its own under `dir` for one engine's swap files ("zerocpp-swap-<pid>.<n>.rank<R>"),
// created after removing the folders of earlier runs on this machine whose process is gone (a
// crash, a kill -9), and removed with everything in it when this object goes.
class SwapFolder {
 public:
  SwapFolder(const std::string& dir, int rank);
  ~SwapFolder();
  SwapFolder(const SwapFolder&) = delete;
  SwapFolder& operator=(const SwapFolder&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Before anything is allocated: `dir` exists, is a writable directory, and its filesystem has
// `needed` bytes free; a zero::Error naming the key, the path and the sizes otherwise.
void check_swap_dir(const std::string& dir, int64_t needed, const std::string& key);

}  // namespace zero::offload
