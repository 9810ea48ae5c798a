// The TensorBoard side of the monitors: CRC-32C, the hand-written protobuf fields, the TFRecord
// framing, and the event file TensorBoardMonitor leaves on disk. Expected bytes were worked out by
// hand from the field numbers in src/monitor/event_encoding.h; the CRCs of those bytes come from
// the bitwise CRC in tests/monitor/read_tfevents.py, and Python's protobuf encodes the same
// messages to the same bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "monitor/crc32c.h"
#include "monitor/event_encoding.h"
#include "zero/monitor.h"

namespace zero::monitor {
namespace {

std::string bytes(std::initializer_list<unsigned> values) {
  std::string out;
  for (unsigned v : values) out += static_cast<char>(v);
  return out;
}

std::string read_event_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(Crc32c, StandardCheckValues) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  // RFC 3720 (iSCSI) appendix B.4.
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending += static_cast<char>(i);
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
}

TEST(Crc32c, MaskRotatesAndAddsTheDelta) {
  // ((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xA282EAD8, modulo 2^32.
  EXPECT_EQ(masked_crc32c("123456789"), 0xC78AB0E5u);
}

const std::string kScalarEvent = bytes({
    0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F,  // wall_time = 1.5 (field 1, fixed64)
    0x10, 0xAC, 0x02,                    // step = 300 (field 2, varint)
    0x2A, 0x0B,                          // summary (field 5), 11 bytes
    0x0A, 0x09,                          //   value (field 1), 9 bytes
    0x0A, 0x02, 'l', 'r',                //     tag = "lr"
    0x15, 0, 0, 0x80, 0x3E});            //     simple_value = 0.25f (field 2, fixed32)

TEST(EventEncoding, ScalarEventBytes) { EXPECT_EQ(encode_scalar_event(1.5, 300, "lr", 0.25f), kScalarEvent); }

TEST(EventEncoding, FileVersionEventBytes) {
  std::string expected = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x1A, 0x0D}) + "brain.Event:2";
  EXPECT_EQ(encode_file_version_event(1.5), expected);
}

TEST(EventEncoding, ZeroStepIsLeftOutAndNegativeStepTakesTenBytes) {
  std::string at_zero = encode_scalar_event(1.5, 0, "x", 0.0f);
  EXPECT_EQ(at_zero.substr(9, 1), bytes({0x2A}));  // no step field after wall_time
  EXPECT_EQ(at_zero.substr(at_zero.size() - 5), bytes({0x15, 0, 0, 0, 0}));  // a oneof 0.0 is kept
  std::string negative = encode_scalar_event(1.5, -1, "x", 0.0f);
  EXPECT_EQ(negative.substr(9, 11), bytes({0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}));
}

TEST(EventEncoding, RecordFraming) {
  std::string record = frame_record(kScalarEvent);
  std::string expected = bytes({25, 0, 0, 0, 0, 0, 0, 0, 0x8B, 0xF1, 0x08, 0x28}) + kScalarEvent +
                         bytes({0x45, 0xFB, 0x0C, 0xD9});
  EXPECT_EQ(record, expected);
}

TEST(TensorBoardMonitor, WritesAVersionedFileVisibleAfterEachBatch) {
  auto root = std::filesystem::path(testing::TempDir()) / "zero_monitor_tb";
  std::filesystem::remove_all(root);
  TensorBoardMonitor monitor({.enabled = true, .output_path = root.string(), .job_name = "job"});
  EXPECT_EQ(monitor.file().parent_path(), root / "job");
  std::string name = monitor.file().filename().string();
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_EQ(name.substr(30, 1), ".") << "ten digits of seconds: " << name;

  std::string header = read_event_file(monitor.file());
  ASSERT_EQ(header.size(), 12u + 24u + 4u);
  EXPECT_EQ(header.substr(12 + 9, 15), bytes({0x1A, 0x0D}) + "brain.Event:2");

  monitor.write_events({{"Train/Samples/lr", 0.25, 300}});  // no destructor, no flush call: on disk now
  std::string after = read_event_file(monitor.file());
  ASSERT_EQ(after.size(), header.size() + 12 + 39 + 4);
  std::string event = after.substr(header.size() + 12, 39);
  EXPECT_EQ(event.substr(9), bytes({0x10, 0xAC, 0x02, 0x2A, 0x19, 0x0A, 0x17, 0x0A, 0x10}) + "Train/Samples/lr" +
                                 bytes({0x15, 0, 0, 0x80, 0x3E}));
  EXPECT_EQ(frame_record(event), after.substr(header.size()));
}

TEST(TensorBoardMonitor, TwoWritersInOneSecondGetTwoFiles) {
  auto root = std::filesystem::path(testing::TempDir()) / "zero_monitor_tb_two";
  std::filesystem::remove_all(root);
  MonitorConfig config{.enabled = true, .output_path = root.string(), .job_name = "job"};
  TensorBoardMonitor first(config), second(config);
  EXPECT_NE(first.file(), second.file());
}

}  // namespace
}  // namespace zero::monitor
