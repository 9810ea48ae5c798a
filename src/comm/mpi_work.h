// Work implementations shared by the backends.
#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

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
  // Starts only once every piece started before it has completed (and finished): the all-gather
  // of results that earlier pieces' finish computed. Every rank still starts pieces in one order.
  bool after_earlier = false;
  // The tensors MPI reads and writes, as the start passes them (after prepare): what
  // ZERO_DEBUG_BUFFERS checks are still in place when the piece completes. May be empty.
  std::function<std::vector<at::Tensor>()> buffers;
  std::vector<const void*> started_at;  // their addresses at the start (debug mode only)
};

// Runs all pieces now, one after the other, with MPI's blocking calls. Returns the first error code.
int run_pieces(std::vector<MpiPiece>& pieces);

std::string mpi_error_string(int code);

}  // namespace zero::comm_detail
