// CsvMonitor, MonitorMaster and the monitors' errors (zero/monitor.h). The TensorBoard bytes are
// tested in tests/monitor/event_encoding_test.cpp; tests/monitor/reader_test.sh reads both
// outputs back with Python.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include "monitor/append_file.h"
#include "monitor/python_float.h"
#include "zero/error.h"
#include "zero/monitor.h"

namespace zero::monitor {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::path(testing::TempDir()) / ("zero_monitor_" + name);
  fs::remove_all(dir);
  return dir;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(PythonFloatRepr, MatchesPythonRepr) {
  // Each right-hand side is what python3 -c 'print(repr(x))' prints.
  EXPECT_EQ(python_float_repr(0.001), "0.001");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(1e-05), "1e-05");
  EXPECT_EQ(python_float_repr(2.5e-07), "2.5e-07");
  EXPECT_EQ(python_float_repr(65536.0), "65536.0");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1234567890123456.7), "1234567890123456.8");
  EXPECT_EQ(python_float_repr(12345678901234567.0), "1.2345678901234568e+16");
  EXPECT_EQ(python_float_repr(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(python_float_repr(123.456), "123.456");
  EXPECT_EQ(python_float_repr(0.0), "0.0");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(-1.5), "-1.5");
  EXPECT_EQ(python_float_repr(5e-324), "5e-324");
  EXPECT_EQ(python_float_repr(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(python_float_repr(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(python_float_repr(-std::numeric_limits<double>::infinity()), "-inf");
}

TEST(CsvMonitor, FileStemReplacesSlashesAndSpaces) {
  EXPECT_EQ(CsvMonitor::file_stem("Train/Samples/lr"), "Train_Samples_lr");
  EXPECT_EQ(CsvMonitor::file_stem("my metric/a b"), "my_metric_a_b");
}

TEST(CsvMonitor, WritesDeepSpeedsLayout) {
  fs::path root = fresh_dir("csv");
  CsvMonitor monitor({.enabled = true, .output_path = root.string(), .job_name = "job"});
  EXPECT_EQ(monitor.dir(), root / "job");
  monitor.write_events({{"Train/Samples/lr", 0.001, 8}, {"Train/Samples/loss_scale", 65536.0, 8}});
  monitor.write_events({{"Train/Samples/lr", 1e-05, 16}, {"Train/Samples/loss_scale", 32768.0, 16}});
  EXPECT_EQ(read_file(root / "job" / "Train_Samples_lr.csv"), "step,lr\r\n8,0.001\r\n16,1e-05\r\n");
  EXPECT_EQ(read_file(root / "job" / "Train_Samples_loss_scale.csv"),
            "step,loss_scale\r\n8,65536.0\r\n16,32768.0\r\n");
}

TEST(CsvMonitor, HeaderOfANameWithoutSlashesOrWithACommaOrQuote) {
  fs::path root = fresh_dir("csv_names");
  CsvMonitor monitor({.enabled = true, .output_path = root.string(), .job_name = "j"});
  monitor.write_events({{"tokens per second", 12.5, 3}, {"Eval/a,\"b\"", -1, 3}});
  EXPECT_EQ(read_file(root / "j" / "tokens_per_second.csv"), "step,tokens per second\r\n3,12.5\r\n");
  EXPECT_EQ(read_file(root / "j" / "Eval_a,\"b\".csv"), "step,\"a,\"\"b\"\"\"\r\n3,-1.0\r\n");
}

TEST(CsvMonitor, ANewMonitorAppendsWithItsOwnHeaderAsDeepSpeedDoes) {
  fs::path root = fresh_dir("csv_restart");
  MonitorConfig config{.enabled = true, .output_path = root.string(), .job_name = "j"};
  CsvMonitor(config).write_events({{"Train/Samples/lr", 0.5, 1}});
  CsvMonitor(config).write_events({{"Train/Samples/lr", 0.25, 2}});
  EXPECT_EQ(read_file(root / "j" / "Train_Samples_lr.csv"), "step,lr\r\n1,0.5\r\nstep,lr\r\n2,0.25\r\n");
}

TEST(LogDir, JoinsOutputPathAndJobNameLikeOsPathJoin) {
  EXPECT_EQ(log_dir({.output_path = "", .job_name = "DeepSpeedJobName"}), fs::path("DeepSpeedJobName"));
  EXPECT_EQ(log_dir({.output_path = "/runs", .job_name = "a"}), fs::path("/runs/a"));
  EXPECT_EQ(log_dir({.output_path = "/runs/", .job_name = "a"}), fs::path("/runs/a"));
  EXPECT_EQ(log_dir({.output_path = "/runs", .job_name = "/abs"}), fs::path("/abs"));
}

TEST(MonitorErrors, UncreatableDirectoryFailsTheConstructorNamingIt) {
  fs::path root = fresh_dir("errors");
  fs::create_directories(root);
  std::ofstream(root / "a_file") << "x";
  // Under a regular file: fails even for root, unlike a permission test.
  MonitorConfig config{.enabled = true, .output_path = (root / "a_file").string(), .job_name = "job"};
  std::string dir = (root / "a_file" / "job").string();
  for (int which = 0; which < 2; ++which) {
    try {
      if (which == 0) CsvMonitor monitor(config);
      if (which == 1) TensorBoardMonitor monitor(config);
      ADD_FAILURE() << "no error for monitor " << which;
    } catch (const Error& e) {
      EXPECT_EQ(e.subject(), dir);
      EXPECT_NE(std::string(e.what()).find("'" + dir + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(which == 0 ? "csv_monitor" : "tensorboard"), std::string::npos);
    }
  }
}

TEST(MonitorErrors, DiskFullFailsWriteEventsNamingTheFile) {
  fs::path root = fresh_dir("full");
  CsvMonitor monitor({.enabled = true, .output_path = root.string(), .job_name = "j"});
  fs::create_symlink("/dev/full", root / "j" / "Train_Samples_lr.csv");  // writes fail with ENOSPC
  std::string file = (root / "j" / "Train_Samples_lr.csv").string();
  try {
    monitor.write_events({{"Train/Samples/lr", 0.5, 1}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.subject(), file);
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  // The same for the descriptor TensorBoardMonitor keeps open.
  AppendFile full = AppendFile::open_or_create("/dev/full");
  EXPECT_THROW(full.append("record"), Error);
}

TEST(MonitorMaster, NothingEnabledIsANoOp) {
  Config config = Config::parse("{}");
  MonitorMaster monitor(config, 0);
  EXPECT_FALSE(monitor.enabled());
  monitor.write_events({{"Train/Samples/lr", 0.5, 1}});
}

TEST(MonitorMaster, WritesBothOnRankZeroAndNothingElsewhere) {
  fs::path root = fresh_dir("master");
  Config config = Config::parse(R"({"tensorboard": {"enabled": true, "output_path": ")" + root.string() +
                                R"(/tb", "job_name": "run1"}, "csv_monitor": {"enabled": true, "output_path": ")" +
                                root.string() + R"(/csv", "job_name": "run1"}})");
  MonitorMaster rank1(config, 1);
  EXPECT_FALSE(rank1.enabled());
  rank1.write_events({{"Train/Samples/lr", 0.5, 1}});
  EXPECT_FALSE(fs::exists(root));

  MonitorMaster rank0(config, 0);
  EXPECT_TRUE(rank0.enabled());
  rank0.write_events({{"Train/Samples/lr", 0.5, 1}});
  EXPECT_EQ(read_file(root / "csv" / "run1" / "Train_Samples_lr.csv"), "step,lr\r\n1,0.5\r\n");
  int event_files = 0;
  for (const auto& entry : fs::directory_iterator(root / "tb" / "run1")) {
    event_files += entry.path().filename().string().starts_with("events.out.tfevents.");
    EXPECT_GT(entry.file_size(), 40u);  // the version record and one scalar
  }
  EXPECT_EQ(event_files, 1);
}

}  // namespace
}  // namespace zero::monitor
