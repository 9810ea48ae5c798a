// zero::World — this process's place in the job: rank, size, node, and the communicators.
//
//   zero::World world = zero::World::from_environment();
//
// Under mpirun, srun or another MPI launcher it initialises MPI (and finalises it when the last
// World is destroyed); as a plain process with no launcher it is a world of one with the local
// backend and needs no MPI runtime at all.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "zero/communicator.h"

namespace zero {

class World {
 public:
  static World from_environment(const CommunicatorOptions& options = {});
  // A world of one process, whatever the environment says.
  static World single_process();

  World(World&&) noexcept;
  World& operator=(World&&) noexcept;
  ~World();

  int rank() const;
  int size() const;
  int local_rank() const;  // rank among the processes on this node
  int local_size() const;
  // This process's rank, and its rank among the processes on its node, in the world every split()
  // began from (an unsplit world's own): what names a process to an operator — the metrics'
  // rank label and port, the one process that prints — when the engine runs over a
  // data-parallel group.
  int process_rank() const;
  int process_local_rank() const;
  int node() const;  // index of this node, 0..num_nodes()-1, in rank order
  int num_nodes() const;
  // The host each rank runs on, as the launch placed it (gethostname on that rank), and its node.
  // Ranks with the same host name form a node (ZERO_RANKS_PER_NODE=k instead cuts the ranks into
  // nodes of k consecutive ranks, to test several nodes' logic on one machine).
  const std::string& host(int rank) const;
  int node_of(int rank) const;
  // "rank 3 (host worker-2)": how errors name a rank.
  std::string describe_rank(int rank) const;
  bool distributed() const;  // launched by an MPI launcher

  // The whole world. Across several nodes its reduce-scatter, all-gather, all-reduce, broadcast
  // and all-to-all run as exchanges within the node and across nodes, which send across nodes
  // only what must cross and count it exactly (Communicator::inter_node_bytes);
  // ZERO_FLAT_COLLECTIVES=1 uses MPI's own collectives instead.
  Communicator& communicator();
  // New communicators (collective over the world: every rank must call them, in the same order).
  std::unique_ptr<Communicator> intra_node();  // the ranks of this node
  std::unique_ptr<Communicator> inter_node();  // one rank per node: those with this local_rank
  // `ranks` lists world ranks; ranks not listed get nullptr. Every rank passes the same list.
  std::unique_ptr<Communicator> group(const std::vector<int>& ranks);
  // The ranks that pass the same `color` as a World of their own, in this world's rank order,
  // with their hosts and nodes (collective over this world: every rank calls it). Tensor
  // parallelism's groups and data-parallel groups are such worlds (zero/tensor_parallel.h).
  // `options` (null: this world's) for the new world's communicators.
  World split(int color, const CommunicatorOptions* options = nullptr);

 private:
  struct State;
  explicit World(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// True when the environment shows an MPI launcher (OpenMPI, MPICH/PMI, PMIx, Slurm).
bool launched_by_mpi();

}  // namespace zero
