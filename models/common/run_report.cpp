#include "models/common/run_report.h"

#include <ATen/ATen.h>

#include <atomic>

#include "zero/communicator.h"
#include "zero/world.h"

namespace zero::gpt {
namespace {
std::atomic<int> g_stop_signal{0};
}  // namespace

bool stop_requested() { return g_stop_signal.load() != 0; }
void clear_stop_request() { g_stop_signal = 0; }
void note_stop_signal(int signal_number) { g_stop_signal = signal_number; }

void stop_anywhere(at::Tensor& shared, World& tensor_parallel) {
  at::Tensor stop = shared.narrow(0, 1, 1).clone();
  tensor_parallel.communicator().all_reduce(stop, ReduceOp::kMax, {.async = false});
  shared.narrow(0, 1, 1).copy_(stop);
}

}  // namespace zero::gpt
