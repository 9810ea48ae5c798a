#include "models/common/run_report.h"

#include <atomic>

namespace zero::gpt {
namespace {
std::atomic<int> g_stop_signal{0};
}  // namespace

bool stop_requested() { return g_stop_signal.load() != 0; }
void clear_stop_request() { g_stop_signal = 0; }
void note_stop_signal(int signal_number) { g_stop_signal = signal_number; }

}  // namespace zero::gpt
