// Writes a few steps of DeepSpeed-style events through MonitorMaster (tensorboard and
// csv_monitor both on) and lists what it wrote, for tests/monitor/read_tfevents.py to compare:
//   monitor_writer_demo OUTPUT_PATH EXPECTED_TSV
// EXPECTED_TSV gets one line per event, "tag<TAB>step<TAB>value" with the value as %.17g.
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "zero/config.h"
#include "zero/monitor.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s OUTPUT_PATH EXPECTED_TSV\n", argv[0]);
    return 2;
  }
  try {
    std::string out = argv[1];
    zero::Config config = zero::Config::parse(
        R"({"tensorboard": {"enabled": true, "output_path": ")" + out + R"(", "job_name": "demo"},
            "csv_monitor": {"enabled": true, "output_path": ")" + out + R"(", "job_name": "demo"}})");
    zero::monitor::MonitorMaster monitor(config, /*global_rank=*/0);

    std::FILE* expected = std::fopen(argv[2], "w");
    if (!expected) throw std::runtime_error(std::string("cannot write ") + argv[2]);
    const int64_t train_batch_size = 8;
    double loss_scale = 65536.0;
    for (int step = 1; step <= 4; ++step) {
      int64_t global_samples = step * train_batch_size;  // the engine's step value for events
      std::vector<zero::monitor::Event> events = {
          {"Train/Samples/train_loss", 10.0 / (step + 2), global_samples},  // 1/3-like: float32 rounds
          {"Train/Samples/lr", step * 1e-05, global_samples},               // 1e-05: exponent form in CSV
          {"Train/Samples/loss_scale", loss_scale, global_samples},         // 65536.0
      };
      if (step == 4) {  // CSV values at the edges of Python's fixed and exponent notation
        events.push_back({"Train/Samples/elapsed_time_ms_forward", 1e15, global_samples});
        events.push_back({"Train/Samples/elapsed_time_ms_step", 3e20, global_samples});
      }
      monitor.write_events(events);
      for (const auto& e : events) std::fprintf(expected, "%s\t%lld\t%.17g\n", e.name.c_str(), (long long)e.step, e.value);
      loss_scale /= 2;
    }
    std::fclose(expected);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "monitor_writer_demo: %s\n", e.what());
    return 1;
  }
  return 0;
}
