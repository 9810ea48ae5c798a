#include "zero/world.h"

#include <mpi.h>

#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>

#include "comm/hierarchical_communicator.h"
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
  int process_rank = -1, process_local_rank = -1;  // -1: this world is not a split one (rank, local_rank)
  std::vector<std::string> hosts;  // by rank
  std::vector<int> node_of;        // by rank
  bool distributed = false;
  MPI_Comm mpi = MPI_COMM_NULL;  // the communicator's own handle (distributed worlds), for split()
  CommunicatorOptions options;
  std::unique_ptr<Communicator> world;
  void place_on_nodes(const std::vector<std::string>& keys);
  void connect(MPI_Comm comm, const CommunicatorOptions& options);
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
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  state->hosts = {name};
  state->node_of = {0};
  return World(std::move(state));
}

// srun started several tasks but gave them no process manager (srun --mpi=none, or a slurm.conf
// whose MpiDefault is none): each would train alone on all the data, a silent N-fold waste.
static void refuse_srun_without_pmi() {
  const int tasks = env_int("SLURM_STEP_NUM_TASKS", 1);
  if (tasks <= 1) return;
  throw Error("srun started " + std::to_string(tasks) +
                  " tasks without an MPI process manager, so each would train alone: launch with srun --mpi=pmix "
                  "(or zero-run inside the allocation, which does)",
              "SLURM_STEP_NUM_TASKS", env_int("SLURM_PROCID", -1));
}

World World::from_environment(const CommunicatorOptions& options) {
  if (!launched_by_mpi()) {
    refuse_srun_without_pmi();
    return single_process();
  }
  acquire_mpi();
  auto state = std::make_unique<State>();
  state->distributed = true;
  MPI_Comm world_comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &world_comm);  // our own context: user MPI traffic cannot collide with ours
  MPI_Comm_rank(world_comm, &state->rank);
  MPI_Comm_size(world_comm, &state->size);

  // Every rank's host name, as the launch placed it: ranks on one host form a node.
  // ZERO_RANKS_PER_NODE=k instead cuts the ranks into nodes of k consecutive ranks, which lets
  // one machine test multi-node logic.
  std::vector<char> names(static_cast<size_t>(state->size) * MPI_MAX_PROCESSOR_NAME, '\0');
  int length = 0;
  MPI_Get_processor_name(names.data() + static_cast<size_t>(state->rank) * MPI_MAX_PROCESSOR_NAME, &length);
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, world_comm);
  const int per_node = env_int("ZERO_RANKS_PER_NODE", 0);
  std::vector<std::string> keys;
  for (int r = 0; r < state->size; ++r) {
    state->hosts.emplace_back(names.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
    keys.push_back(per_node > 0 ? std::to_string(r / per_node) : state->hosts.back());
  }
  state->place_on_nodes(keys);
  state->connect(world_comm, options);
  return World(std::move(state));
}

// Nodes from each rank's node key (its host, or its block of ZERO_RANKS_PER_NODE ranks),
// numbered in order of their lowest rank, and this rank's place on its node.
void World::State::place_on_nodes(const std::vector<std::string>& keys) {
  std::map<std::string, int> node_index;
  node_of.clear();
  for (const std::string& key : keys)
    node_of.push_back(node_index.emplace(key, static_cast<int>(node_index.size())).first->second);
  node = node_of[static_cast<size_t>(rank)];
  num_nodes = static_cast<int>(node_index.size());
  local_rank = 0;
  local_size = 0;
  for (int r = 0; r < size; ++r) {
    if (node_of[static_cast<size_t>(r)] != node) continue;
    if (r < rank) ++local_rank;
    ++local_size;
  }
}

// The world's communicator over `comm`: exchanges within and across nodes when the world spans
// several, MPI's own collectives otherwise (or with ZERO_FLAT_COLLECTIVES=1).
void World::State::connect(MPI_Comm comm, const CommunicatorOptions& with_options) {
  mpi = comm;
  options = with_options;
  auto flat = std::make_unique<comm_detail::MpiCommunicator>(comm, with_options);
  const char* flat_only = std::getenv("ZERO_FLAT_COLLECTIVES");
  if (num_nodes > 1 && !(flat_only && std::string(flat_only) == "1")) {
    world = std::make_unique<comm_detail::HierarchicalCommunicator>(std::move(flat), node_of);
  } else {
    world = std::move(flat);
  }
}

World World::split(int color, const CommunicatorOptions* options) {
  if (!state_->distributed) {
    World one = single_process();
    one.state_->hosts = state_->hosts;
    one.state_->process_rank = process_rank();
    one.state_->process_local_rank = process_local_rank();
    return one;
  }
  std::vector<int> colors(static_cast<size_t>(state_->size));
  MPI_Allgather(&color, 1, MPI_INT, colors.data(), 1, MPI_INT, state_->mpi);
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(state_->mpi, color, state_->rank, &comm);
  acquire_mpi();
  auto state = std::make_unique<State>();
  state->distributed = true;
  std::vector<std::string> keys;  // the members' nodes, as this world placed them
  for (int r = 0; r < state_->size; ++r) {
    if (colors[static_cast<size_t>(r)] != color) continue;
    if (r == state_->rank) state->rank = static_cast<int>(keys.size());  // its place among the members
    state->hosts.push_back(state_->hosts[static_cast<size_t>(r)]);
    keys.push_back(std::to_string(state_->node_of[static_cast<size_t>(r)]));
  }
  state->size = static_cast<int>(keys.size());
  state->process_rank = process_rank();
  state->process_local_rank = process_local_rank();
  state->place_on_nodes(keys);
  state->connect(comm, options ? *options : state_->options);
  return World(std::move(state));
}

int World::rank() const { return state_->rank; }
int World::size() const { return state_->size; }
int World::local_rank() const { return state_->local_rank; }
int World::local_size() const { return state_->local_size; }
int World::process_rank() const { return state_->process_rank >= 0 ? state_->process_rank : state_->rank; }
int World::process_local_rank() const {
  return state_->process_local_rank >= 0 ? state_->process_local_rank : state_->local_rank;
}
int World::node() const { return state_->node; }
int World::num_nodes() const { return state_->num_nodes; }
const std::string& World::host(int rank) const { return state_->hosts.at(static_cast<size_t>(rank)); }
int World::node_of(int rank) const { return state_->node_of.at(static_cast<size_t>(rank)); }
std::string World::describe_rank(int rank) const {
  return "rank " + std::to_string(rank) + " (host " + host(rank) + ")";
}
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
