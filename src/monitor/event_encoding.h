// The bytes of a TensorBoard event file: a handful of protobuf fields, written by hand, inside
// TFRecord framing. No protobuf library: zerocpp writes two message shapes and nothing else.
//
// Field numbers (tensorboard/compat/proto/event.proto and summary.proto in tensorflow/tensorboard):
//   Event   { double wall_time = 1; int64 step = 2;
//             oneof what { string file_version = 3; Summary summary = 5; } }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; oneof value { float simple_value = 2; } }
// tests/monitor/tfevents_subset.proto declares the same subset for the independent reader.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zero::monitor {

// The first event of every file: Event { wall_time, file_version: "brain.Event:2" }.
std::string encode_file_version_event(double wall_time);

// Event { wall_time, step, summary { value { tag, simple_value } } }.
std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, float value);

// One TFRecord: uint64 length (little-endian), masked CRC-32C of those 8 bytes, the data,
// masked CRC-32C of the data (CRCs little-endian too).
std::string frame_record(std::string_view data);

}  // namespace zero::monitor
