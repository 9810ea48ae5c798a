// ExchangeWork — a collective made of stages of point-to-point messages, each stage started when
// the one before it has finished. The hierarchical collectives (hierarchical_communicator.h) are
// built from it: within the node, then across nodes, or the reverse.
//
// Note: every message of a stage carries the tag (sequence number of the collective, stage), and
// MPI matches point-to-point messages by source and tag, not by start order. So a stage may start
// whenever this rank gets round to it (in test() or wait()), and collectives in flight together
// cannot mix their messages, which MPI's own collectives only avoid by starting in one order.
#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "zero/communicator.h"

namespace zero::comm_detail {

// One message: a contiguous tensor sent to or received from `peer` (a rank of the communicator).
struct Message {
  int peer;
  at::Tensor data;
};

// One stage: its messages, made when it starts (they may read what earlier stages produced), and
// what to do once they have all arrived.
struct ExchangeStage {
  std::function<void(std::vector<Message>& sends, std::vector<Message>& receives)> make;
  std::function<void()> finish;  // may be empty
};

class ExchangeWork;

// The exchanges of one communicator still in flight. A stage starts only when its rank tests or
// waits, so a rank waiting for anything (another exchange, a consistency check, a barrier) keeps
// every one of its exchanges moving: the other ranks may be waiting for their next stage.
class ExchangeProgress {
 public:
  void add(const std::shared_ptr<ExchangeWork>& work);
  // Tests every exchange in flight (errors stay with their works, for their waiters).
  void poll();

 private:
  std::mutex mutex_;
  std::vector<std::weak_ptr<ExchangeWork>> works_;
  bool polling_ = false;  // poll() → test() → a stage's finish never polls again
};

class ExchangeWork : public Work {
 public:
  // Starts the first stage at once. `tag_base` must differ between collectives that can be in
  // flight together (a sequence number) and leave room for one tag per stage.
  ExchangeWork(const char* what, MPI_Comm comm, int rank, int tag_base, std::vector<ExchangeStage> stages,
               std::shared_ptr<ExchangeProgress> progress);
  ~ExchangeWork() override;  // waits: the messages still read and write the caller's tensors

  void wait() override;
  bool test() override;
  std::string error() const override { return error_; }

  static constexpr int kMaxStages = 8;

 private:
  void start_stage();
  void complete_stage();
  // Records the error (every later test() or wait() throws it) and ends the exchange.
  void fail(int code);
  void fail(const std::string& why);

  const char* what_;
  MPI_Comm comm_;
  int rank_;
  int tag_base_;
  std::vector<ExchangeStage> stages_;
  size_t stage_ = 0;
  std::vector<Message> sends_, receives_;  // the running stage's, alive until it completes
  std::vector<MPI_Request> requests_;
  std::string error_;
  std::shared_ptr<ExchangeProgress> progress_;
  std::recursive_mutex mutex_;  // test() from the owner and from another waiter's poll()
};

}  // namespace zero::comm_detail
