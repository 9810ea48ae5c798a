#include "offload/swap_cipher.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "zero/error.h"

namespace zero::offload {
namespace {

constexpr int kNonceBytes = 12;  // GCM's standard IV length

void require(bool ok, const char* what) {
  if (!ok) throw Error(std::string("encrypt_swap: OpenSSL's AES-256-GCM failed in ") + what);
}

// The nonce: the counter in the first 8 bytes, little-endian, the rest zero.
std::array<unsigned char, kNonceBytes> nonce_bytes(uint64_t counter) {
  std::array<unsigned char, kNonceBytes> iv{};
  for (int i = 0; i < 8; ++i) iv[static_cast<size_t>(i)] = static_cast<unsigned char>(counter >> (8 * i));
  return iv;
}

// The associated data: the page's offset in the file, so that a page cannot be moved.
std::array<unsigned char, 8> offset_bytes(int64_t offset) {
  std::array<unsigned char, 8> aad{};
  for (int i = 0; i < 8; ++i)
    aad[static_cast<size_t>(i)] = static_cast<unsigned char>(static_cast<uint64_t>(offset) >> (8 * i));
  return aad;
}

}  // namespace

struct SwapCipher::Contexts {
  EVP_CIPHER_CTX* encrypt = EVP_CIPHER_CTX_new();
  EVP_CIPHER_CTX* decrypt = EVP_CIPHER_CTX_new();
  ~Contexts() {
    EVP_CIPHER_CTX_free(encrypt);
    EVP_CIPHER_CTX_free(decrypt);
  }
};

SwapCipher::SwapCipher(int64_t file_bytes)
    : pages_(static_cast<size_t>((file_bytes + kPageBytes - 1) / kPageBytes)), contexts_(new Contexts) {
  try {
    require(contexts_->encrypt != nullptr && contexts_->decrypt != nullptr, "EVP_CIPHER_CTX_new");
    require(RAND_bytes(key_.data(), static_cast<int>(key_.size())) == 1, "RAND_bytes (no key)");
    // The key schedule is set once per direction; each page then sets only its nonce.
    require(EVP_EncryptInit_ex(contexts_->encrypt, EVP_aes_256_gcm(), nullptr, key_.data(), nullptr) == 1,
            "EVP_EncryptInit_ex");
    require(EVP_DecryptInit_ex(contexts_->decrypt, EVP_aes_256_gcm(), nullptr, key_.data(), nullptr) == 1,
            "EVP_DecryptInit_ex");
  } catch (...) {
    OPENSSL_cleanse(key_.data(), key_.size());
    delete contexts_;
    throw;
  }
}

SwapCipher::~SwapCipher() {
  OPENSSL_cleanse(key_.data(), key_.size());
  delete contexts_;  // EVP_CIPHER_CTX_free wipes the key schedule
}

void SwapCipher::seal(int64_t offset, const char* plain, char* sealed, int64_t bytes, PageSeal* seals) {
  EVP_CIPHER_CTX* ctx = contexts_->encrypt;
  for (int64_t done = 0; done < bytes; done += kPageBytes) {
    PageSeal& page = seals[done / kPageBytes];
    page.nonce = next_nonce_++;
    const auto iv = nonce_bytes(page.nonce);
    const auto aad = offset_bytes(offset + done);
    int n = 0, tail = 0;
    require(EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, iv.data()) == 1, "EVP_EncryptInit_ex");
    require(EVP_EncryptUpdate(ctx, nullptr, &n, aad.data(), static_cast<int>(aad.size())) == 1, "EVP_EncryptUpdate");
    auto* out = reinterpret_cast<unsigned char*>(sealed + done);
    require(EVP_EncryptUpdate(ctx, out, &n, reinterpret_cast<const unsigned char*>(plain + done),
                              static_cast<int>(kPageBytes)) == 1,
            "EVP_EncryptUpdate");
    require(EVP_EncryptFinal_ex(ctx, out + n, &tail) == 1, "EVP_EncryptFinal_ex");
    require(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes), page.tag.data()) == 1,
            "EVP_CTRL_GCM_GET_TAG");
  }
}

void SwapCipher::commit(int64_t offset, const PageSeal* seals, int64_t bytes) {
  std::copy(seals, seals + bytes / kPageBytes, pages_.begin() + offset / kPageBytes);
}

int64_t SwapCipher::open(int64_t offset, char* data, int64_t bytes) {
  EVP_CIPHER_CTX* ctx = contexts_->decrypt;
  for (int64_t done = 0; done < bytes; done += kPageBytes) {
    PageSeal& page = pages_[static_cast<size_t>((offset + done) / kPageBytes)];
    auto* text = reinterpret_cast<unsigned char*>(data + done);
    if (page.nonce == 0) {  // never written: the reserved block's zeros, whatever the disk holds
      std::memset(text, 0, static_cast<size_t>(kPageBytes));
      continue;
    }
    const auto iv = nonce_bytes(page.nonce);
    const auto aad = offset_bytes(offset + done);
    int n = 0, tail = 0;
    require(EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, iv.data()) == 1, "EVP_DecryptInit_ex");
    require(EVP_DecryptUpdate(ctx, nullptr, &n, aad.data(), static_cast<int>(aad.size())) == 1, "EVP_DecryptUpdate");
    require(EVP_DecryptUpdate(ctx, text, &n, text, static_cast<int>(kPageBytes)) == 1, "EVP_DecryptUpdate");
    require(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes), page.tag.data()) == 1,
            "EVP_CTRL_GCM_SET_TAG");
    if (EVP_DecryptFinal_ex(ctx, text + n, &tail) != 1) return offset + done;
  }
  return -1;
}

}  // namespace zero::offload
