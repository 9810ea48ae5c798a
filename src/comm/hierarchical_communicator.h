// HierarchicalCommunicator — the world's collectives when it spans several hosts: each one runs as
// an exchange within the node (shared memory) and an exchange across nodes (the network), so a
// rank sends across the network only what must cross it, and knows exactly how much that is.
//
// With H nodes of L ranks each (N = H·L), for a reduce-scatter of N chunks of c elements:
//   1. within the node, each rank sends every local peer the H chunks that peer's "column" owns
//      (the ranks with the peer's local index, one per node), and sums what it gets: the node's
//      partial sums of its own column's chunks;
//   2. across nodes, each rank sends each rank of its column that rank's partial sum, and sums
//      the H partial sums of its own chunk.
// A rank then sends (H-1)·c elements across nodes, (H-1)/H of the message over L, the least any
// algorithm can (each node must ship out everything it holds of the other nodes' chunks). An
// all-gather runs the same stages in reverse; an all-reduce is both, through a padded buffer; a
// broadcast goes from the root to one rank per node, then within each node; an all-to-all is one
// direct exchange. Reductions accumulate 16-bit floats in float32, nodes' and ranks' terms in
// rank order, and round once. Nodes of unequal sizes get one direct exchange between all ranks
// (every chunk goes straight to its owner), whose bytes are exact too.
//
// Barriers, splits and the consistency checks run on the flat MPI communicator underneath.
#pragma once

#include <mpi.h>

#include <atomic>
#include <memory>
#include <vector>

#include "comm/exchange_work.h"
#include "comm/mpi_communicator.h"
#include "zero/communicator.h"

namespace zero::comm_detail {

struct ExchangeGroups;  // who is in this rank's node and in its column

class HierarchicalCommunicator : public Communicator {
 public:
  // `node_of_rank[r]` is the node of rank r of `flat`; every rank passes the same vector.
  HierarchicalCommunicator(std::unique_ptr<MpiCommunicator> flat, std::vector<int> node_of_rank);
  ~HierarchicalCommunicator() override;

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  std::string backend() const override { return "mpi"; }
  int64_t inter_node_bytes() const override { return inter_node_bytes_->load(); }

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

  MpiCommunicator& flat() { return *flat_; }

 private:
  std::shared_ptr<Work> start(const char* what, const CollectiveOptions& options, std::vector<ExchangeStage> stages,
                              std::vector<at::Tensor> keep_alive);

  std::unique_ptr<MpiCommunicator> flat_;
  std::shared_ptr<const ExchangeGroups> groups_;
  MPI_Comm exchange_comm_ = MPI_COMM_NULL;  // a duplicate: its messages never meet other traffic
  int64_t sequence_ = 0;
  int tag_limit_ = 32767;
  std::shared_ptr<ExchangeProgress> progress_ = std::make_shared<ExchangeProgress>();
  // Bytes sent to other nodes; shared with the stages of works that may outlive a call.
  std::shared_ptr<std::atomic<int64_t>> inter_node_bytes_ = std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace zero::comm_detail
