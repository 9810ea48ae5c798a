// zero-run's planning: hostfiles, --include/--exclude filters and the mpirun command line.
// Pure string work (no processes), so every case is unit-tested through the dry run.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace zero::launch {

// One host and the slot indices (GPU ids on GPU hosts) the job may use on it.
struct HostSlots {
  std::string host;
  std::vector<int> slots;
};

// DeepSpeed's hostfile: one "HOST slots=N" per line; '#' starts a comment; blank lines skipped.
// Throws zero::Error naming `origin` and the line.
std::vector<HostSlots> parse_hostfile(const std::string& text, const std::string& origin);
std::vector<HostSlots> read_hostfile(const std::string& path);

// DeepSpeed's filter syntax: "host1@host2:0,2" — whole hosts, or chosen slots of a host.
// include keeps only what it names; exclude removes it. Throws naming the unknown host or slot.
std::vector<HostSlots> apply_include(const std::vector<HostSlots>& pool, const std::string& spec);
std::vector<HostSlots> apply_exclude(const std::vector<HostSlots>& pool, const std::string& spec);

// KEY=VALUE lines of a .deepspeed_env file ('#' comments, blank lines skipped).
std::vector<std::pair<std::string, std::string>> parse_env_file(const std::string& text, const std::string& origin);

struct LaunchOptions {
  int num_procs = -1;                     // -n; without a hostfile: processes on this machine
  std::string hostfile;                   // path, or empty
  std::vector<HostSlots> hostfile_hosts;  // parsed hostfile (when hostfile is set)
  int num_nodes = -1;                     // first N hosts
  int num_gpus = -1;                      // first N slots per host
  std::string include, exclude;
  std::string master_addr;  // default: the first host (127.0.0.1 for this machine)
  int master_port = 29500;
  std::vector<std::pair<std::string, std::string>> env;  // --env and .deepspeed_env, in order
  std::string log_dir;                                   // one log per rank, or empty
  std::string status_dir;                                // where rank wrappers record failures
  std::string self;                                      // path of zero-run itself (the rank wrapper)
  std::vector<std::string> program;                      // PROGRAM ARGS...
  bool as_root = false;                                  // add --allow-run-as-root
  int local_cpus = 1;                                    // cores of this machine, for the oversubscription warning
  std::string mpirun = "mpirun";
  std::string srun = "srun";                  // the launcher inside a Slurm allocation (slurm_plan.h)
  std::vector<std::string> launcher_args;     // --launcher_args: extra words for mpirun or srun
};

struct LaunchPlan {
  std::vector<std::string> argv;  // the mpirun command
  std::vector<HostSlots> hosts;   // what runs where
  int total_procs = 0;
  std::vector<std::string> warnings;
};

// Throws zero::Error for contradictory or impossible requests, naming the flag.
LaunchPlan plan_launch(const LaunchOptions& options);

// What each rank runs: zero-run itself as the rank wrapper (rank_status.h), then the program.
std::vector<std::string> rank_command(const LaunchOptions& options);

// The command as a shell would need it typed (single quotes where needed).
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace zero::launch
