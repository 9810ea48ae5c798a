#include "comm/mpi_work.h"
#include "zero/error.h"

namespace zero::comm_detail {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

int run_pieces(std::vector<MpiPiece>& pieces) {
  for (auto& piece : pieces) {
    if (piece.prepare) piece.prepare();
    int code = piece.run();
    if (code != MPI_SUCCESS) return code;
    if (piece.finish) piece.finish();
    piece = {};  // return its staging buffers before the next piece takes some
  }
  return MPI_SUCCESS;
}

MpiWork::MpiWork(std::vector<MpiPiece> pieces, size_t window, std::string what, int rank,
                 std::vector<at::Tensor> keep_alive)
    : pieces_(std::move(pieces)),
      window_(std::max<size_t>(window, 1)),
      what_(std::move(what)),
      rank_(rank),
      keep_alive_(std::move(keep_alive)) {
  start_more();
  if (!error_.empty()) {  // a start failed: let the pieces already running finish before we unwind
    for (auto& [index, request] : in_flight_) MPI_Wait(&request, MPI_STATUS_IGNORE);
    in_flight_.clear();
    throw_if_failed();
  }
}

MpiWork::~MpiWork() {
  // Note: MPI still owns the buffers of pieces in flight; freeing them first would let it write
  // into released memory.
  for (auto& [index, request] : in_flight_) MPI_Wait(&request, MPI_STATUS_IGNORE);
}

void MpiWork::start_more() {
  while (error_.empty() && next_ < pieces_.size() && in_flight_.size() < window_) {
    MpiPiece& piece = pieces_[next_];
    if (piece.prepare) piece.prepare();
    MPI_Request request;
    int code = piece.start(&request);
    if (code != MPI_SUCCESS) {
      error_ = what_ + " failed: " + mpi_error_string(code);
      return;
    }
    in_flight_.emplace_back(next_++, request);
  }
}

void MpiWork::retire_oldest(int mpi_code) {
  size_t index = in_flight_.front().first;
  in_flight_.pop_front();
  if (mpi_code != MPI_SUCCESS) {
    if (error_.empty()) error_ = what_ + " failed: " + mpi_error_string(mpi_code);
    return;
  }
  if (pieces_[index].finish) pieces_[index].finish();
  pieces_[index] = {};  // release its staging buffers now
  start_more();
}

void MpiWork::throw_if_failed() const {
  if (!error_.empty()) throw Error(error_, what_, rank_);
}

void MpiWork::wait() {
  while (!in_flight_.empty()) retire_oldest(MPI_Wait(&in_flight_.front().second, MPI_STATUS_IGNORE));
  keep_alive_.clear();
  throw_if_failed();
}

bool MpiWork::test() {
  while (!in_flight_.empty()) {
    int flag = 0;
    int code = MPI_Test(&in_flight_.front().second, &flag, MPI_STATUS_IGNORE);
    if (code == MPI_SUCCESS && !flag) break;
    retire_oldest(code);
  }
  throw_if_failed();
  if (!in_flight_.empty()) return false;
  keep_alive_.clear();
  return true;
}

}  // namespace zero::comm_detail
