// SwapCipher — AES-256-GCM for one swap file ("zerocpp": {"encrypt_swap": true}; the seed's
// security note on NVMe spill: swapped weights and optimizer state are sensitive). Torch-free.
//
// Every kIoAlignment page written is sealed on its own, so that any aligned range the engine
// reads back can be checked by itself:
//   - the key is 32 random bytes (OpenSSL's RAND_bytes) that exist only in this object's memory,
//     never on disk, and are wiped when it goes: what a swap file holds is unreadable after the
//     process ends, even if the blocks were not yet reused;
//   - each seal uses a nonce of its own (a counter per file, never reused under one key), and the
//     page's offset is authenticated with it (associated data);
//   - the nonce and the 16-byte tag of each page stay in memory (24 bytes per 4096-byte page:
//     0.6 % of the swap's size), so a page read back is authenticated: a changed byte, a page
//     copied from elsewhere in the file or an older copy put back fails.
// A page's new seal counts once its write has landed (commit): a write that failed leaves the
// page as it was. As without encryption, a page must not be read while a write of it is in
// flight. Pages never written read as zeros, as the unencrypted file's reserved blocks do.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace zero::offload {

class SwapCipher {
 public:
  explicit SwapCipher(int64_t file_bytes);  // the swap file's size: one seal record per page
  ~SwapCipher();
  SwapCipher(const SwapCipher&) = delete;
  SwapCipher& operator=(const SwapCipher&) = delete;

  struct PageSeal {
    uint64_t nonce = 0;  // 0: never written
    std::array<unsigned char, 16> tag{};
  };
  // Encrypts `bytes` (whole pages) of `plain` into `sealed`, as the pages at `offset` in the
  // file, and their seals into `seals` (bytes / kPageBytes of them)...
  void seal(int64_t offset, const char* plain, char* sealed, int64_t bytes, PageSeal* seals);
  // ...which become the pages' own once the write has landed.
  void commit(int64_t offset, const PageSeal* seals, int64_t bytes);
  // Decrypts in place the `bytes` read at `offset`. Returns the offset of the first page that
  // fails authentication (its bytes are then undefined), or -1 when every page is intact.
  int64_t open(int64_t offset, char* data, int64_t bytes);

  static constexpr int64_t kPageBytes = 4096;  // kIoAlignment
  static constexpr int64_t kTagBytes = 16;

 private:
  std::vector<PageSeal> pages_;
  std::array<unsigned char, 32> key_{};
  uint64_t next_nonce_ = 1;
  struct Contexts;  // OpenSSL's EVP_CIPHER_CTX for each direction, the key schedule set once
  Contexts* contexts_;
};

}  // namespace zero::offload
