// zero::CountingCommunicator — a decorator that counts every collective: calls, bytes and time
// per op and message size. The comms logger and the communication-volume tests build on it.
//
// Bytes follow nccl-tests: `message_bytes` is the op's buffer (all-reduce and broadcast: the
// tensor; reduce-scatter: the input; all-gather: the output; all-to-all: the input), and
// `bus_bytes` is what each rank must send for it: all-reduce 2(n-1)/n, reduce-scatter and
// all-gather and all-to-all (n-1)/n, broadcast 1 times the message. Time runs from the call to
// the moment wait() or test() sees the collective complete.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "zero/communicator.h"

namespace zero {

struct OpStats {
  int64_t calls = 0;
  int64_t elements = 0;       // message elements, summed over calls
  int64_t message_bytes = 0;  // summed over calls
  double bus_bytes = 0;       // summed over calls
  double seconds = 0;         // summed over completed calls
};

// One completed collective, as CommStats::set_listener sees it.
struct CollectiveRecord {
  CollectiveOp op;
  int64_t message_bytes;
  double bus_bytes;
  double seconds;  // from the call until completion was observed
};

class CommStats {
 public:
  void add(CollectiveOp op, int64_t elements, int64_t message_bytes, double bus_bytes);
  void add_time(CollectiveOp op, int64_t message_bytes, double bus_bytes, double seconds);
  // Called on the caller's thread for every completed collective (the comms logger's per-call
  // lines, the metrics' latency histograms). Set it before collectives run; empty: none.
  void set_listener(std::function<void(const CollectiveRecord&)> listener);
  // Totals of one op over all message sizes.
  OpStats total(CollectiveOp op) const;
  // Per (op, message bytes).
  std::map<std::pair<CollectiveOp, int64_t>, OpStats> by_size() const;
  void reset();

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<CollectiveOp, int64_t>, OpStats> stats_;
  std::function<void(const CollectiveRecord&)> listener_;
};

class CountingCommunicator : public Communicator {
 public:
  // Counts into `stats` (shared, so several communicators can feed one logger).
  CountingCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<CommStats> stats);
  // Wraps a communicator owned elsewhere (e.g. World::communicator()).
  CountingCommunicator(Communicator& inner, std::shared_ptr<CommStats> stats);

  const std::shared_ptr<CommStats>& stats() const { return stats_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }
  int64_t inter_node_bytes() const override { return inner_->inter_node_bytes(); }
  // The defaults repeat Communicator's, so calls through this type read the same.
  std::shared_ptr<Work> all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum,
                                   const CollectiveOptions& options = {}) override;
  std::shared_ptr<Work> reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op = ReduceOp::kSum,
                                       const CollectiveOptions& options = {}) override;
  std::shared_ptr<Work> all_gather(const at::Tensor& input, const at::Tensor& output,
                                   const CollectiveOptions& options = {}) override;
  std::shared_ptr<Work> broadcast(const at::Tensor& tensor, int root, const CollectiveOptions& options = {}) override;
  std::shared_ptr<Work> all_to_all(const at::Tensor& input, const at::Tensor& output,
                                   const CollectiveOptions& options = {}) override;
  // Counted as an all-to-all of the elements this rank sends (bus bytes: those to other ranks).
  std::shared_ptr<Work> all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                                     const at::Tensor& output, const std::vector<int64_t>& receive_counts,
                                     const CollectiveOptions& options = {}) override;
  std::shared_ptr<Work> barrier(const CollectiveOptions& options = {}) override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  // Counts the message, then times `launch` from the call until completion is observed.
  // `quantize_bits` (ZeRO++): the message counted is the quantized one, `chunks` of its chunks.
  std::shared_ptr<Work> timed(CollectiveOp op, bool blocking, const at::Tensor* message, double bus_factor,
                              const std::function<std::shared_ptr<Work>()>& launch, int quantize_bits = 0,
                              int chunks = 1);
  // The same with the counts given: elements and bytes of the message, bytes sent to other ranks.
  std::shared_ptr<Work> timed_exactly(CollectiveOp op, bool blocking, int64_t elements, int64_t bytes, double bus_bytes,
                                      const std::function<std::shared_ptr<Work>()>& launch);

  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
  std::shared_ptr<CommStats> stats_;
};

}  // namespace zero
