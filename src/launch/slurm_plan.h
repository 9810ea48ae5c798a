// zero-run inside a Slurm allocation (sbatch, salloc): the ranks are started by srun, which
// places them on the allocation's nodes and hands each its rank through PMIx. Pure string work,
// unit-tested through the dry run like the mpirun plan.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "launch/launch_plan.h"

namespace zero::launch {

// What the allocation granted, from the environment sbatch/salloc give the job.
struct SlurmAllocation {
  std::string job_id;              // SLURM_JOB_ID; empty: not inside an allocation
  std::vector<std::string> nodes;  // SLURM_JOB_NODELIST, expanded
  int ntasks = -1;                 // SLURM_NTASKS (the tasks asked for with -n), or -1
};

// Reads SLURM_JOB_ID, SLURM_JOB_NODELIST and SLURM_NTASKS through `getenv` (a parameter so tests
// can hand in an environment). Throws naming the variable when one is malformed.
SlurmAllocation slurm_allocation(const std::function<const char*(const char*)>& getenv);

// Slurm's host list syntax: "node[01-03,7],login" -> node01 node02 node03 node7 login (zero
// padding kept; several bracket groups in one name multiply out). Throws naming the list.
std::vector<std::string> expand_hostlist(const std::string& list);

// A DeepSpeed --launcher_args string split as a shell would (whitespace, '...' and "...").
std::vector<std::string> split_launcher_args(const std::string& args);

// The srun command for `options` inside `allocation`. DeepSpeed's flags map onto srun's:
// -n N -> -n N; --num_nodes K -> --nodes K; --num_gpus G -> --ntasks-per-node G; --include
// "h1@h2" -> --nodelist h1,h2; --exclude -> --exclude (whole hosts only: Slurm places the tasks).
// A hostfile is refused (the allocation names the hosts). Throws zero::Error naming the flag.
LaunchPlan plan_srun(const LaunchOptions& options, const SlurmAllocation& allocation);

}  // namespace zero::launch
