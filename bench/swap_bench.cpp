// bench_swap — SwapFile's sequential write and read bandwidth (io_uring, O_DIRECT) on a directory,
// the numbers bench/swap_vs_fio.sh compares with fio's on the same directory, block size and
// queue depth. With --encrypt, the file is encrypted (encrypt_swap: AES-256-GCM per 4 KiB page),
// and the cipher's own speed in memory (SwapCipher alone, one thread) is printed beside it: the
// bound an encrypted swap cannot beat however fast the disk.
//
//   build/bench/bench_swap --dir /var/tmp --gib 1 --block-size 1048576 --queue-depth 8 [--encrypt]
#include <fmt/core.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

#include "offload/swap_cipher.h"
#include "offload/swap_file.h"
#include "programs.h"

namespace bench_swap {

int run(int argc, char** argv) {
  CLI::App app{"bench_swap: SwapFile write and read GB/s"};
  std::string dir = "/var/tmp";
  double gib = 1;
  int64_t block = 1 << 20, depth = 8, chunk_mib = 64;
  bool encrypt = false;
  app.add_option("--dir", dir, "directory for the swap file");
  app.add_option("--gib", gib, "file size, GiB");
  app.add_option("--block-size", block, "aio.block_size, bytes");
  app.add_option("--queue-depth", depth, "aio.queue_depth");
  app.add_option("--chunk-mib", chunk_mib, "bytes per request (a tile), MiB");
  app.add_flag("--encrypt", encrypt, "encrypt_swap: AES-256-GCM");
  CLI11_PARSE(app, argc, argv);
  using Clock = std::chrono::steady_clock;
  const int64_t chunk = chunk_mib << 20;
  const int64_t size = static_cast<int64_t>(gib * (1 << 30)) / chunk * chunk;
  const std::string path = dir + "/bench_swap." + std::to_string(::getpid());
  if (size <= 0) {
    fmt::print(stderr, "bench_swap: --gib {} holds no request of --chunk-mib {}\n", gib, chunk_mib);
    return 2;
  }
  zero::offload::SwapFile swap(path, size, {.block_size = block, .queue_depth = depth, .encrypt = encrypt});
  // Two buffers: one request in flight while the next is issued, as the optimizer's pipeline does.
  zero::offload::AlignedBuffer buffers[2] = {zero::offload::AlignedBuffer(chunk), zero::offload::AlignedBuffer(chunk)};
  // Random bytes, as weights and optimizer state are to a disk (and as fio writes): a virtual
  // disk may store and read back pages of zeros faster than others.
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (auto& buffer : buffers) {
    auto* words = static_cast<uint64_t*>(buffer.data());
    for (int64_t i = 0; i < chunk / 8; ++i) {
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      words[i] = state;
    }
  }
  auto bandwidth = [&](bool write) {
    const auto start = Clock::now();
    for (int64_t offset = 0, i = 0; offset < size; offset += chunk, ++i) {
      void* b = buffers[i % 2].data();
      write ? swap.write(offset, b, chunk) : swap.read(offset, b, chunk);
    }
    swap.wait_all();
    return static_cast<double>(size) / 1e9 / std::chrono::duration<double>(Clock::now() - start).count();
  };
  // The first pass turns the reserved (unwritten) extents into written ones, as an offloaded run's
  // start-up does; a training step then overwrites: that steady state is what is timed.
  const double first = bandwidth(true);
  const double w = bandwidth(true), r = bandwidth(false);
  fmt::print(
      "bench_swap: {} bytes, block {} B, queue depth {}, requests of {} MiB, O_DIRECT {}{}: write {:.3f} GB/s, read "
      "{:.3f} GB/s (first write into the new file {:.3f} GB/s)\n",
      size, block, depth, chunk_mib, swap.direct() ? "on" : "off", encrypt ? ", encrypted" : "", w, r, first);
  if (encrypt) {
    // The cipher alone on one request's bytes in memory, best of 3.
    zero::offload::SwapCipher cipher(chunk);
    char* plain = static_cast<char*>(buffers[0].data());
    char* sealed = static_cast<char*>(buffers[1].data());
    std::vector<zero::offload::SwapCipher::PageSeal> seals(static_cast<size_t>(chunk / zero::offload::kIoAlignment));
    double seal = 0, open = 0;
    for (int repeat = 0; repeat < 3; ++repeat) {
      auto start = Clock::now();
      cipher.seal(0, plain, sealed, chunk, seals.data());
      cipher.commit(0, seals.data(), chunk);
      seal = std::max(seal,
                      static_cast<double>(chunk) / 1e9 / std::chrono::duration<double>(Clock::now() - start).count());
      start = Clock::now();
      if (cipher.open(0, sealed, chunk) >= 0) throw std::runtime_error("bench_swap: the cipher failed its own pages");
      open = std::max(open,
                      static_cast<double>(chunk) / 1e9 / std::chrono::duration<double>(Clock::now() - start).count());
    }
    fmt::print("bench_swap: AES-256-GCM in memory, one thread: seal {:.3f} GB/s, open {:.3f} GB/s\n", seal, open);
  }
  return 0;
}

}  // namespace bench_swap
