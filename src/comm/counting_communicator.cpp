#include <ATen/core/Tensor.h>

#include <chrono>

#include "comm/quantize.h"
#include "zero/comm_stats.h"

namespace zero {
namespace {

using Clock = std::chrono::steady_clock;

// Records the time from launch to the first moment completion is observed.
class TimedWork : public Work {
 public:
  TimedWork(std::shared_ptr<Work> inner, std::shared_ptr<CommStats> stats, CollectiveOp op, int64_t bytes,
            double bus_bytes, Clock::time_point start)
      : inner_(std::move(inner)), stats_(std::move(stats)), op_(op), bytes_(bytes), bus_bytes_(bus_bytes), start_(start) {}
  void wait() override {
    inner_->wait();
    record();
  }
  bool test() override {
    bool complete = inner_->test();
    if (complete) record();
    return complete;
  }
  std::string error() const override { return inner_->error(); }

 private:
  void record() {
    if (recorded_) return;
    recorded_ = true;
    stats_->add_time(op_, bytes_, bus_bytes_, std::chrono::duration<double>(Clock::now() - start_).count());
  }
  std::shared_ptr<Work> inner_;
  std::shared_ptr<CommStats> stats_;
  CollectiveOp op_;
  int64_t bytes_;
  double bus_bytes_;
  Clock::time_point start_;
  bool recorded_ = false;
};

}  // namespace

CountingCommunicator::CountingCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<CommStats> stats)
    : owned_(std::move(inner)), inner_(owned_.get()), stats_(std::move(stats)) {}

CountingCommunicator::CountingCommunicator(Communicator& inner, std::shared_ptr<CommStats> stats)
    : inner_(&inner), stats_(std::move(stats)) {}

std::shared_ptr<Work> CountingCommunicator::timed(CollectiveOp op, bool blocking, const at::Tensor* message,
                                                  double bus_factor,
                                                  const std::function<std::shared_ptr<Work>()>& launch,
                                                  int quantize_bits, int chunks) {
  const int64_t elements = message ? message->numel() : 0;
  int64_t bytes = message ? static_cast<int64_t>(message->nbytes()) : 0;
  if (quantize_bits == 4 || quantize_bits == 8) bytes = chunks * comm_detail::quantized_bytes(elements / chunks, quantize_bits);
  return timed_exactly(op, blocking, elements, bytes, bus_factor * static_cast<double>(bytes), launch);
}

std::shared_ptr<Work> CountingCommunicator::timed_exactly(CollectiveOp op, bool blocking, int64_t elements,
                                                          int64_t bytes, double bus_bytes,
                                                          const std::function<std::shared_ptr<Work>()>& launch) {
  stats_->add(op, elements, bytes, bus_bytes);
  // Note: the clock starts before the backend call, so the time covers the launch (and the
  // consistency check) as well as the transfer.
  auto start = Clock::now();
  auto work = std::make_shared<TimedWork>(launch(), stats_, op, bytes, bus_bytes, start);
  if (blocking) work->wait();  // already complete: records its time now (nobody waits on it later)
  return work;
}

std::shared_ptr<Work> CountingCommunicator::all_reduce(const at::Tensor& tensor, ReduceOp op,
                                                       const CollectiveOptions& options) {
  const double n = size();
  return timed(CollectiveOp::kAllReduce, !options.async, &tensor, 2 * (n - 1) / n,
               [&] { return inner_->all_reduce(tensor, op, options); });
}

std::shared_ptr<Work> CountingCommunicator::reduce_scatter(const at::Tensor& input, const at::Tensor& output,
                                                           ReduceOp op, const CollectiveOptions& options) {
  const double n = size();
  return timed(
      CollectiveOp::kReduceScatter, !options.async, &input, (n - 1) / n,
      [&] { return inner_->reduce_scatter(input, output, op, options); }, options.quantize_bits, size());
}

std::shared_ptr<Work> CountingCommunicator::all_gather(const at::Tensor& input, const at::Tensor& output,
                                                       const CollectiveOptions& options) {
  const double n = size();
  return timed(
      CollectiveOp::kAllGather, !options.async, &output, (n - 1) / n,
      [&] { return inner_->all_gather(input, output, options); }, options.quantize_bits, size());
}

std::shared_ptr<Work> CountingCommunicator::broadcast(const at::Tensor& tensor, int root,
                                                      const CollectiveOptions& options) {
  return timed(CollectiveOp::kBroadcast, !options.async, &tensor, size() > 1 ? 1.0 : 0.0,
               [&] { return inner_->broadcast(tensor, root, options); });
}

std::shared_ptr<Work> CountingCommunicator::all_to_all(const at::Tensor& input, const at::Tensor& output,
                                                       const CollectiveOptions& options) {
  const double n = size();
  return timed(CollectiveOp::kAllToAll, !options.async, &input, (n - 1) / n,
               [&] { return inner_->all_to_all(input, output, options); });
}

std::shared_ptr<Work> CountingCommunicator::all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                                                         const at::Tensor& output,
                                                         const std::vector<int64_t>& receive_counts,
                                                         const CollectiveOptions& options) {
  const int64_t own = rank() < static_cast<int>(send_counts.size()) ? send_counts[static_cast<size_t>(rank())] : 0;
  const int64_t bytes = static_cast<int64_t>(input.nbytes());
  return timed_exactly(CollectiveOp::kAllToAll, !options.async, input.numel(), bytes,
                       static_cast<double>(bytes - own * static_cast<int64_t>(input.element_size())),
                       [&] { return inner_->all_to_all_v(input, send_counts, output, receive_counts, options); });
}

std::shared_ptr<Work> CountingCommunicator::barrier(const CollectiveOptions& options) {
  return timed(CollectiveOp::kBarrier, !options.async, nullptr, 0.0, [&] { return inner_->barrier(options); });
}

std::unique_ptr<Communicator> CountingCommunicator::split(int color, int key) {
  auto child = inner_->split(color, key);
  if (!child) return nullptr;
  return std::make_unique<CountingCommunicator>(std::move(child), stats_);
}

}  // namespace zero
