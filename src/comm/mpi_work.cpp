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

}  // namespace zero::comm_detail
