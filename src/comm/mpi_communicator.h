// The MPI backend: MPI-3 non-blocking collectives on host tensors.
#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <functional>
#include <vector>

#include "comm/mpi_work.h"
#include "comm/piece_queue.h"
#include "comm/staging_pool.h"
#include "zero/communicator.h"

namespace zero::comm_detail {

class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction) unless it is MPI_COMM_WORLD.
  MpiCommunicator(MPI_Comm comm, const CommunicatorOptions& options);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  MPI_Comm handle() const { return comm_; }
  // Runs the local argument checks, then (with check_consistency) compares validity, op, dtype,
  // count and `extra` (root or reduce op) across ranks: when anything differs every rank throws,
  // so no rank is left waiting in a collective the others abandoned.
  void validate(CollectiveOp op, const std::function<void()>& local_checks, const at::Tensor* tensor, int64_t count,
                int64_t extra);
  // Called again and again while the consistency check or a collective waits for the other
  // ranks: work of another kind in flight on this rank (a hierarchical collective's next stage)
  // that the others may need before they can arrive. Set, blocking collectives run as
  // non-blocking ones waited for with it. Empty: they block in MPI.
  void set_progress_while_waiting(std::function<void()> progress) { progress_ = std::move(progress); }

  std::shared_ptr<Work> all_reduce(const at::Tensor& tensor, ReduceOp op, const CollectiveOptions& options) override;
  std::shared_ptr<Work> reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                                       const CollectiveOptions& options) override;
  std::shared_ptr<Work> all_gather(const at::Tensor& input, const at::Tensor& output,
                                   const CollectiveOptions& options) override;
  std::shared_ptr<Work> broadcast(const at::Tensor& tensor, int root, const CollectiveOptions& options) override;
  std::shared_ptr<Work> all_to_all(const at::Tensor& input, const at::Tensor& output,
                                   const CollectiveOptions& options) override;
  std::shared_ptr<Work> all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                                     const at::Tensor& output, const std::vector<int64_t>& receive_counts,
                                     const CollectiveOptions& options) override;
  std::shared_ptr<Work> barrier(const CollectiveOptions& options) override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  void check(int code, const char* what) const;
  // Runs `pieces` now with blocking calls (options.async false), or returns a Work that starts them.
  std::shared_ptr<Work> launch(const char* what, const CollectiveOptions& options, std::vector<MpiPiece> pieces,
                               std::vector<at::Tensor> keep_alive);
  std::shared_ptr<Work> launch(const char* what, const CollectiveOptions& options,
                               std::function<int(MPI_Request*)> start, std::function<int()> run,
                               std::vector<at::Tensor> keep_alive);
  // Whether a reduction of `t` by `op` runs as an exchange (CommunicatorOptions::exchange_reductions).
  bool exchanges(const at::Tensor& t, ReduceOp op) const;
  // A reduce-scatter as exchanges: rank r's share is `length[r]` elements of `input` (flat) from
  // `first[r]`; this rank's sum lands in `out`. Piece by piece, see all_reduce.
  std::vector<MpiPiece> exchange_reduce_pieces(const at::Tensor& input, const std::vector<int64_t>& first,
                                               const std::vector<int64_t>& length, const at::Tensor& out, ReduceOp op);
  // All-gathers in place, in `count` pieces, of what rank r holds at `first[r]` (`length[r]`
  // elements of `flat`): the second half of an exchange all-reduce.
  std::vector<MpiPiece> exchange_gather_pieces(const at::Tensor& flat, const std::vector<int64_t>& first,
                                               const std::vector<int64_t>& length, size_t count);
  // Elements per MPI call of a reduction (CommunicatorOptions::reduction_piece_bytes).
  int64_t piece_elements(int64_t total, int64_t bytes_per_element, CollectiveOp op) const;

  MPI_Comm comm_;
  CommunicatorOptions options_;
  std::shared_ptr<StagingPool> staging_ = std::make_shared<StagingPool>();
  int rank_ = 0, size_ = 1;
  // Every non-blocking piece on comm_, in call order (see piece_queue.h for why one queue).
  std::shared_ptr<PieceQueue> queue_;
  std::function<void()> progress_;
};

}  // namespace zero::comm_detail
