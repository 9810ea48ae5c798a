#include "monitor/event_encoding.h"

#include <bit>
#include <cmath>

#include "monitor/crc32c.h"

namespace zero::monitor {
namespace {

// Protobuf wire types.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

void put_little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
}

void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (field << 3) | type); }

void put_double(std::string& out, uint32_t field, double value) {
  put_key(out, field, kFixed64);
  put_little_endian(out, std::bit_cast<uint64_t>(value), 8);
}

void put_float(std::string& out, uint32_t field, float value) {
  put_key(out, field, kFixed32);
  put_little_endian(out, std::bit_cast<uint32_t>(value), 4);
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// Note: proto3 leaves out a plain field that holds its default (0, +0.0), and a reader fills the
// default back in; members of a oneof (file_version, summary, simple_value) are always written.
void put_event_header(std::string& out, double wall_time, int64_t step) {
  if (wall_time != 0 || std::signbit(wall_time)) put_double(out, 1, wall_time);
  if (step != 0) {
    put_key(out, 2, kVarint);
    put_varint(out, static_cast<uint64_t>(step));  // a negative int64 takes ten bytes
  }
}

}  // namespace

std::string encode_file_version_event(double wall_time) {
  std::string event;
  put_event_header(event, wall_time, 0);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string summary_value;
  put_bytes(summary_value, 1, tag);
  put_float(summary_value, 2, value);
  std::string summary;
  put_bytes(summary, 1, summary_value);
  std::string event;
  put_event_header(event, wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

std::string frame_record(std::string_view data) {
  std::string length;
  put_little_endian(length, data.size(), 8);
  std::string record = length;
  put_little_endian(record, masked_crc32c(length), 4);
  record += data;
  put_little_endian(record, masked_crc32c(data), 4);
  return record;
}

}  // namespace zero::monitor
