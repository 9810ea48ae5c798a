#include "monitor/crc32c.h"

#include <array>

namespace zero::monitor {
namespace {

constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;
constexpr uint32_t kMaskDelta = 0xA282EAD8u;

// One byte at a time: event files are written a few hundred bytes per step, so the table
// version is fast enough and short enough to check by eye.
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ kReflectedPolynomial : crc >> 1;
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) crc = kTable[(crc ^ b) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view bytes) {
  uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

}  // namespace zero::monitor
