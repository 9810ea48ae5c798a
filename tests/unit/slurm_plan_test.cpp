// zero-run inside a Slurm allocation: host lists as Slurm writes them, the allocation read from
// the environment, and the srun command for DeepSpeed's flags (the dry run's command line).
#include "launch/slurm_plan.h"

#include <gtest/gtest.h>

#include <map>

#include "zero/error.h"

using namespace zero::launch;

namespace {

using Hosts = std::vector<std::string>;

SlurmAllocation allocation(int ntasks = 8) { return {"4242", {"gpu01", "gpu02", "gpu03", "gpu04"}, ntasks}; }

LaunchOptions options() {
  LaunchOptions o;
  o.self = "/bin/zero-run";
  o.status_dir = "/tmp/s";
  o.program = {"./train", "--config", "ds.json"};
  return o;
}

std::string command(const LaunchOptions& o, const SlurmAllocation& a = allocation()) {
  return shell_join(plan_srun(o, a).argv);
}

const std::string kSrun = "srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=none";
const std::string kSrunWrapped = "/bin/zero-run --rank-wrapper --status-dir /tmp/s -- ./train --config ds.json";

void expect_error(const LaunchOptions& o, const std::string& fragment, const std::string& subject) {
  try {
    plan_srun(o, allocation());
    ADD_FAILURE() << "no error; wanted one with: " << fragment;
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(e.subject(), subject);
  }
}

}  // namespace

// The forms Slurm's documentation and real clusters' SLURM_JOB_NODELIST use.
TEST(SlurmHostlist, ExpandsAsSlurmDoes) {
  EXPECT_EQ(expand_hostlist("vm"), (Hosts{"vm"}));
  EXPECT_EQ(expand_hostlist("a,b"), (Hosts{"a", "b"}));
  EXPECT_EQ(expand_hostlist("node[1-3]"), (Hosts{"node1", "node2", "node3"}));
  EXPECT_EQ(expand_hostlist("gpu[08-10,12],login1"), (Hosts{"gpu08", "gpu09", "gpu10", "gpu12", "login1"}));
  EXPECT_EQ(expand_hostlist("r[1-2]-n[01-02]"), (Hosts{"r1-n01", "r1-n02", "r2-n01", "r2-n02"}));
  EXPECT_EQ(expand_hostlist("nid[001234]"), (Hosts{"nid001234"}));
  for (const char* bad : {"node[1-3", "node[a-b]", "node[3-1]", "a,,b", "node[]"}) {
    EXPECT_THROW(expand_hostlist(bad), zero::Error) << bad;
  }
}

TEST(SlurmAllocation, FromTheEnvironment) {
  std::map<std::string, std::string> env;
  auto get = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  EXPECT_TRUE(slurm_allocation(get).job_id.empty());  // not inside an allocation
  env = {{"SLURM_JOB_ID", "77"}, {"SLURM_JOB_NODELIST", "cn[1-2]"}, {"SLURM_NTASKS", "8"}};
  const SlurmAllocation a = slurm_allocation(get);
  EXPECT_EQ(a.job_id, "77");
  EXPECT_EQ(a.nodes, (Hosts{"cn1", "cn2"}));
  EXPECT_EQ(a.ntasks, 8);
  env.erase("SLURM_NTASKS");  // sbatch -N 2 without -n
  EXPECT_EQ(slurm_allocation(get).ntasks, -1);
  env["SLURM_NTASKS"] = "x";
  EXPECT_THROW(slurm_allocation(get), zero::Error);
  env.erase("SLURM_JOB_NODELIST");
  try {
    slurm_allocation(get);
    ADD_FAILURE();
  } catch (const zero::Error& e) {
    EXPECT_EQ(e.subject(), "SLURM_JOB_NODELIST");
  }
}

TEST(SlurmPlan, SrunCommandForDeepSpeedFlags) {
  LaunchOptions o = options();
  const std::string env = "env MASTER_ADDR=gpu01 MASTER_PORT=29500 ";
  EXPECT_EQ(command(o), env + kSrun + " " + kSrunWrapped);
  EXPECT_EQ(plan_srun(o, allocation()).total_procs, 8);  // the allocation's -n
  EXPECT_EQ(plan_srun(o, allocation(-1)).total_procs, 4);  // srun's default: one per node

  o.num_procs = 6;
  EXPECT_EQ(command(o), env + kSrun + " -n 6 " + kSrunWrapped);
  EXPECT_EQ(plan_srun(o, allocation()).total_procs, 6);

  o = options();
  o.num_nodes = 2;
  o.num_gpus = 4;
  EXPECT_EQ(command(o), env + kSrun + " --nodes 2 --ntasks-per-node 4 " + kSrunWrapped);
  EXPECT_EQ(plan_srun(o, allocation()).total_procs, 8);
  EXPECT_EQ(plan_srun(o, allocation()).hosts.size(), 2u);

  o = options();
  o.include = "gpu02@gpu04";
  EXPECT_EQ(command(o), "env MASTER_ADDR=gpu02 MASTER_PORT=29500 " + kSrun + " --nodelist gpu02,gpu04 " + kSrunWrapped);
  o = options();
  o.exclude = "gpu01";
  EXPECT_EQ(command(o), "env MASTER_ADDR=gpu02 MASTER_PORT=29500 " + kSrun + " --exclude gpu01 " + kSrunWrapped);
  EXPECT_EQ(plan_srun(o, allocation()).hosts.size(), 3u);

  // --env and --launcher_args; a value with a comma travels whole (srun's --export would split it).
  o = options();
  o.env = {{"NCCL_DEBUG", "INFO"}, {"LIST", "a,b"}};
  o.launcher_args = split_launcher_args("--partition gpu --comment 'two words'");
  o.log_dir = "/logs";
  EXPECT_EQ(command(o), env + "NCCL_DEBUG=INFO LIST=a,b " + kSrun +
                            " --partition gpu --comment 'two words' /bin/zero-run --rank-wrapper --status-dir /tmp/s "
                            "--log-dir /logs -- ./train --config ds.json");
}

TEST(SlurmPlan, RefusesWhatSlurmDecides) {
  LaunchOptions o = options();
  o.hostfile = "hosts";
  expect_error(o, "srun places the ranks on the allocation's nodes", "--hostfile");
  o = options();
  o.include = "gpu01:0,1";
  expect_error(o, "name whole hosts", "--include");
  o = options();
  o.exclude = "gpu09";
  expect_error(o, "host \"gpu09\" is not in Slurm job 4242's allocation (gpu01,gpu02,gpu03,gpu04)", "--exclude");
  o = options();
  o.exclude = "gpu01@gpu02@gpu03@gpu04";
  expect_error(o, "no hosts left", "--exclude");
  o = options();
  o.num_nodes = 5;
  expect_error(o, "--num_nodes 5: Slurm job 4242 has 4 node(s)", "--num_nodes");
  o = options();
  o.num_nodes = 2;
  o.include = "gpu01";
  expect_error(o, "cannot be combined", "--num_nodes");
  o = options();
  o.program.clear();
  expect_error(o, "no program", "PROGRAM");
  EXPECT_THROW(split_launcher_args("--comment 'open"), zero::Error);
  EXPECT_EQ(split_launcher_args("  a  \"b c\" ''"), (Hosts{"a", "b c", ""}));
}
