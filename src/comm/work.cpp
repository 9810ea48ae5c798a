#include "comm/mpi_work.h"
#include "zero/error.h"

namespace zero::comm_detail {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

MpiWork::MpiWork(MPI_Request request, std::string what, int rank, std::vector<at::Tensor> keep_alive,
                 std::function<void()> finish)
    : request_(request),
      what_(std::move(what)),
      rank_(rank),
      keep_alive_(std::move(keep_alive)),
      finish_(std::move(finish)) {}

MpiWork::~MpiWork() {
  // Note: MPI still owns our buffers until the request completes; freeing them first would let
  // it write into released memory.
  if (!done_) MPI_Wait(&request_, MPI_STATUS_IGNORE);
}

void MpiWork::complete(int mpi_code) {
  done_ = true;
  if (mpi_code != MPI_SUCCESS) {
    error_ = what_ + " failed: " + mpi_error_string(mpi_code);
  } else if (finish_) {
    finish_();
  }
  keep_alive_.clear();
}

void MpiWork::wait() {
  if (!done_) complete(MPI_Wait(&request_, MPI_STATUS_IGNORE));
  if (!error_.empty()) throw Error(error_, what_, rank_);
}

bool MpiWork::test() {
  if (!done_) {
    int flag = 0;
    int code = MPI_Test(&request_, &flag, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS || flag) complete(code);
  }
  if (!error_.empty()) throw Error(error_, what_, rank_);
  return done_;
}

}  // namespace zero::comm_detail
