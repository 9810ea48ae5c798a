// Work implementations shared by the backends.
#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "zero/communicator.h"

namespace zero::comm_detail {

// Already complete (local backend, or an op with nothing to do).
class CompletedWork : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
  std::string error() const override { return {}; }
};

// One MPI non-blocking collective. `finish` runs once on success (rounding a float32 staging
// buffer back to 16 bits, dividing for an average); `keep_alive` holds every buffer MPI uses.
class MpiWork : public Work {
 public:
  MpiWork(MPI_Request request, std::string what, int rank, std::vector<at::Tensor> keep_alive,
          std::function<void()> finish);
  ~MpiWork() override;
  void wait() override;
  bool test() override;
  std::string error() const override { return error_; }

 private:
  void complete(int mpi_code);

  MPI_Request request_;
  std::string what_;
  int rank_;
  std::vector<at::Tensor> keep_alive_;
  std::function<void()> finish_;
  bool done_ = false;
  std::string error_;
};

std::string mpi_error_string(int code);

}  // namespace zero::comm_detail
