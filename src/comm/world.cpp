#include "zero/world.h"

#include <mpi.h>

#include <cstdlib>
#include <string>

#include "comm/local_communicator.h"
#include "comm/mpi_communicator.h"
#include "zero/error.h"

namespace zero {
namespace {

// Several Worlds may exist in one process (tests make many); MPI may be initialised and
// finalised once only, so the last World alive finalises it.
int g_mpi_users = 0;
bool g_mpi_initialised_here = false;

void acquire_mpi() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    // Note: MULTIPLE lets a communication thread and autograd hooks both call MPI; a runtime that
    // offers less still works for the single-threaded use of this issue.
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      throw Error("MPI_Init_thread failed: is this process started by a working MPI launcher?", "MPI");
    }
    g_mpi_initialised_here = true;
  }
  ++g_mpi_users;
}

void release_mpi() {
  if (--g_mpi_users > 0 || !g_mpi_initialised_here) return;
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised) MPI_Finalize();
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

}  // namespace

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "MPI_LOCALRANKID"}) {
    if (std::getenv(name)) return true;
  }
  return false;
}

struct World::State {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, node = 0, num_nodes = 1;
  bool distributed = false;
  std::unique_ptr<Communicator> world;
  ~State() {
    world.reset();  // free the communicator before MPI goes away
    if (distributed) release_mpi();
  }
};

World::World(std::unique_ptr<State> state) : state_(std::move(state)) {}
World::World(World&&) noexcept = default;
World& World::operator=(World&&) noexcept = default;
World::~World() = default;

World World::single_process() {
  auto state = std::make_unique<State>();
  state->world = std::make_unique<comm_detail::LocalCommunicator>();
  return World(std::move(state));
}

World World::from_environment(const CommunicatorOptions& options) {
  if (!launched_by_mpi()) return single_process();
  acquire_mpi();
  auto state = std::make_unique<State>();
  state->distributed = true;
  MPI_Comm world_comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &world_comm);  // our own context: user MPI traffic cannot collide with ours
  MPI_Comm_rank(world_comm, &state->rank);
  MPI_Comm_size(world_comm, &state->size);

  // Nodes are the groups of ranks that share memory. ZERO_RANKS_PER_NODE=k instead cuts the
  // ranks into nodes of k consecutive ranks, which lets one machine test multi-node logic.
  int per_node = env_int("ZERO_RANKS_PER_NODE", 0);
  int node_key = 0;
  if (per_node > 0) {
    node_key = state->rank / per_node;
  } else {
    MPI_Comm shared = MPI_COMM_NULL;
    MPI_Comm_split_type(world_comm, MPI_COMM_TYPE_SHARED, state->rank, MPI_INFO_NULL, &shared);
    int shared_rank = 0;
    MPI_Comm_rank(shared, &shared_rank);
    // The node's key is the lowest world rank on it, known to all its ranks.
    node_key = state->rank;
    MPI_Allreduce(MPI_IN_PLACE, &node_key, 1, MPI_INT, MPI_MIN, shared);
    MPI_Comm_free(&shared);
  }
  state->world = std::make_unique<comm_detail::MpiCommunicator>(world_comm, options);
  auto node_comm = state->world->split(node_key, state->rank);
  state->local_rank = node_comm->rank();
  state->local_size = node_comm->size();
  // Node index = number of distinct node keys below ours; the leaders (local rank 0) count them.
  auto leaders = state->world->split(state->local_rank == 0 ? 0 : -1, state->rank);
  int node_and_count[2] = {leaders ? leaders->rank() : 0, leaders ? leaders->size() : 0};
  MPI_Bcast(node_and_count, 2, MPI_INT, 0, static_cast<comm_detail::MpiCommunicator*>(node_comm.get())->handle());
  state->node = node_and_count[0];
  state->num_nodes = node_and_count[1];
  return World(std::move(state));
}

int World::rank() const { return state_->rank; }
int World::size() const { return state_->size; }
int World::local_rank() const { return state_->local_rank; }
int World::local_size() const { return state_->local_size; }
int World::node() const { return state_->node; }
int World::num_nodes() const { return state_->num_nodes; }
bool World::distributed() const { return state_->distributed; }
Communicator& World::communicator() { return *state_->world; }

std::unique_ptr<Communicator> World::intra_node() { return state_->world->split(state_->node, state_->rank); }
std::unique_ptr<Communicator> World::inter_node() { return state_->world->split(state_->local_rank, state_->rank); }

std::unique_ptr<Communicator> World::group(const std::vector<int>& ranks) {
  int position = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= state_->size) {
      throw Error(
          "group: rank " + std::to_string(ranks[i]) + " is outside the world of " + std::to_string(state_->size),
          "group", state_->rank);
    }
    if (ranks[i] == state_->rank) position = static_cast<int>(i);
  }
  return state_->world->split(position >= 0 ? 0 : -1, position);
}

}  // namespace zero
