// Work implementations shared by the backends.
#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "zero/communicator.h"

namespace zero::comm_detail {

// Already complete (local backend, blocking calls).
class CompletedWork : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
  std::string error() const override { return {}; }
};

// One MPI call of a collective. Large reductions are split into several (see MpiCommunicator),
// each staging only its own slice, so the float32 copy of a 16-bit buffer never exists whole.
struct MpiPiece {
  std::function<void()> prepare;           // stage the inputs (pack, upcast); may be empty
  std::function<int(MPI_Request*)> start;  // the non-blocking call
  std::function<int()> run;                // the blocking call
  std::function<void()> finish;            // after success: average, write back; may be empty
};

// Runs all pieces now, one after the other, with MPI's blocking calls. Returns the first error code.
int run_pieces(std::vector<MpiPiece>& pieces);

// Non-blocking pieces in order, at most `window` in flight: test() and wait() retire finished
// pieces and start the next ones (with OpenMPI, non-blocking collectives only progress there).
class MpiWork : public Work {
 public:
  MpiWork(std::vector<MpiPiece> pieces, size_t window, std::string what, int rank, std::vector<at::Tensor> keep_alive);
  ~MpiWork() override;
  void wait() override;
  bool test() override;
  std::string error() const override { return error_; }

 private:
  void start_more();
  void retire_oldest(int mpi_code);
  void throw_if_failed() const;

  std::vector<MpiPiece> pieces_;
  size_t window_;
  size_t next_ = 0;  // next piece to start
  std::deque<std::pair<size_t, MPI_Request>> in_flight_;
  std::string what_;
  int rank_;
  std::vector<at::Tensor> keep_alive_;  // the caller's tensors, until every piece is done
  std::string error_;
};

std::string mpi_error_string(int code);

}  // namespace zero::comm_detail
