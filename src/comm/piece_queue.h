// PieceQueue — starts the MPI calls of one communicator's collectives in the order the
// collectives were called, on every rank, whatever the timing.
//
// Note: MPI matches collectives on a communicator by the order in which each rank starts them
// (OpenMPI gives every non-blocking one the next number of a per-communicator counter). A large
// reduction is split into pieces and only a window of them is in flight; the rest start as
// earlier ones finish. When each collective started its own later pieces, two collectives in
// flight interleaved their pieces by each rank's timing: rank 0's third piece of bucket A met
// rank 1's first piece of bucket B — MPI_ERR_TRUNCATE and heap corruption when their sizes
// differed, silently mixed gradients when they agreed (found by tests/stress/gpt_stress.cpp). Here every piece of every
// collective waits in one queue and starts strictly in submission order; a blocking call on the
// communicator first starts everything queued (start_all), so it too comes after them.
//
// Ownership: a piece captures the tensors it reads and writes (and its staging buffers) and stays
// in the queue until MPI reports it complete, whether or not anyone still holds its Work: the
// memory of a collective in flight cannot be returned while MPI uses it. Memory freed by hand
// (stage 3 releasing a unit's bytes) is the owner's to wait for; ZERO_DEBUG_BUFFERS checks it.
#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_work.h"

namespace zero::comm_detail {

class PieceQueue {
 public:
  // One submitted collective: its pieces and their progress.
  struct Collective {
    std::string what;
    std::vector<MpiPiece> pieces;
    std::vector<at::Tensor> keep_alive;  // the caller's tensors, until every piece is done
    size_t remaining = 0;                // pieces not yet complete (or dropped after an error)
    std::string error;
  };

  // `window`: pieces in flight at once on the communicator (bounds the staging memory).
  PieceQueue(size_t window, int rank);
  ~PieceQueue();  // waits for everything in flight
  PieceQueue(const PieceQueue&) = delete;
  PieceQueue& operator=(const PieceQueue&) = delete;

  // Queues the pieces behind every earlier one and starts what the window allows.
  std::shared_ptr<Collective> submit(std::string what, std::vector<MpiPiece> pieces,
                                     std::vector<at::Tensor> keep_alive);
  // Retires what has completed and starts more; true once `c` is complete.
  bool test(Collective& c);
  // Until `c` is complete (finishing earlier collectives on the way, as MPI's order requires).
  void wait(Collective& c);
  // Starts every queued piece now, beyond the window: call before any blocking collective on
  // the communicator, which must come after them on every rank. A piece marked after_earlier
  // first waits for those in flight, calling `progress` meanwhile when it is set.
  void start_all(const std::function<void()>& progress = {});

 private:
  struct Entry {
    std::shared_ptr<Collective> collective;
    size_t index;
  };
  struct Running {
    Entry entry;
    MPI_Request request;
  };
  void start_next();
  void start_more();
  bool front_must_wait() const;  // the next queued piece waits for those in flight (after_earlier)
  void retire(size_t position, int mpi_code);
  void drop_queued(const Collective& c);

  size_t window_;
  int rank_;
  std::deque<Entry> queued_;
  std::deque<Running> in_flight_;  // in start order
};

// The Work handle of one collective submitted to a PieceQueue.
class QueuedWork : public Work {
 public:
  QueuedWork(std::shared_ptr<PieceQueue> queue, std::shared_ptr<PieceQueue::Collective> collective, int rank);
  ~QueuedWork() override;  // waits: the caller may free its tensors right after
  void wait() override;
  bool test() override;
  std::string error() const override { return collective_->error; }

 private:
  std::shared_ptr<PieceQueue> queue_;
  std::shared_ptr<PieceQueue::Collective> collective_;
  int rank_;
};

}  // namespace zero::comm_detail
