// CRC-32C (Castagnoli), the checksum of TFRecord framing in TensorBoard event files.
#pragma once

#include <cstdint>
#include <string_view>

namespace zero::monitor {

// Reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF;
// crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::string_view bytes);

// What TFRecord stores: the CRC rotated right by 15 bits plus a constant. Note: the mask keeps a
// CRC of data that itself holds CRCs from looking like a valid CRC (TensorFlow's rationale).
uint32_t masked_crc32c(std::string_view bytes);

}  // namespace zero::monitor
