// zero-run's dry-run command lines for a table of hostfile / include / exclude cases.
#include "launch/launch_plan.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "launch/rank_status.h"
#include "zero/error.h"

using namespace zero::launch;

namespace {

const char* kHostfile = R"(# two workers
worker-1 slots=4
worker-2 slots=4   # trailing comment

worker-3 slots=2
)";

LaunchOptions base() {
  LaunchOptions o;
  o.self = "/bin/zero-run";
  o.status_dir = "/tmp/s";
  o.program = {"./train", "--config", "ds.json"};
  o.local_cpus = 8;
  return o;
}

LaunchOptions with_hostfile() {
  LaunchOptions o = base();
  o.hostfile = "hosts";
  o.hostfile_hosts = parse_hostfile(kHostfile, "hosts");
  return o;
}

const std::string kWrapped = "/bin/zero-run --rank-wrapper --status-dir /tmp/s -- ./train --config ds.json";
const std::string kLocalEnv = "-x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500";
const std::string kClusterEnv = "-x MASTER_ADDR=worker-1 -x MASTER_PORT=29500";

}  // namespace

TEST(Hostfile, Parses) {
  auto hosts = parse_hostfile(kHostfile, "hosts");
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[1].host, "worker-2");
  EXPECT_EQ(hosts[1].slots, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(hosts[2].slots.size(), 2u);
}

TEST(Hostfile, BadLinesNameFileAndLine) {
  struct Bad {
    const char* text;
    const char* fragment;
  };
  for (const Bad& b : {Bad{"worker-1 slots=4\nworker-2\n", "hosts line 2"}, Bad{"w slots=0\n", "N >= 1"},
                       Bad{"w slots=x\n", "hosts line 1"}, Bad{"w slots=2 extra\n", "hosts line 1"},
                       Bad{"w slots=2\nw slots=2\n", "listed twice"}, Bad{"# nothing\n", "no hosts"},
                       Bad{"w gpus=2\n", "HOST slots=N"}}) {
    try {
      parse_hostfile(b.text, "hosts");
      ADD_FAILURE() << "accepted: " << b.text;
    } catch (const zero::Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.fragment), std::string::npos) << e.what();
    }
  }
}

// Hostfiles from elsewhere (issue 37): a host name that would reach ssh as an option, control
// bytes, a slot count that asks for gigabytes; a million hosts are checked in linear time.
TEST(Hostfile, HostileFilesAreClearErrorsInBoundedTime) {
  struct Bad {
    std::string text;
    const char* fragment;
  };
  for (const Bad& b : {Bad{"-oProxyCommand=touch${IFS}/tmp/pwned slots=1\n", "is not a host name"},
                       Bad{"worker-1 slots=1\n-l slots=1\n", "hosts line 2: \"-l\" is not a host name"},
                       Bad{std::string("work\x01er slots=1\n"), "is not a host name"},
                       Bad{"w;reboot slots=1\n", "is not a host name"}, Bad{".hidden slots=1\n", "is not a host name"},
                       Bad{"w slots=100000000\n", "more than 4096 per host"}}) {
    try {
      parse_hostfile(b.text, "hosts");
      ADD_FAILURE() << "accepted: " << b.text;
    } catch (const zero::Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.fragment), std::string::npos) << e.what();
    }
  }
  // IPv4, IPv6 and underscores are host names.
  EXPECT_EQ(parse_hostfile("10.0.0.7 slots=2\nfe80::1 slots=1\nnode_3 slots=1\n", "hosts").size(), 3u);
  // The million hosts whose quadratic duplicate check hung: refused at the 65537th; a duplicate
  // among the 65536 allowed is found by hash.
  std::string many;
  for (int i = 0; i < 1'000'000; ++i) many += "h" + std::to_string(i) + " slots=1\n";
  const auto start = std::chrono::steady_clock::now();
  for (const auto& [text, fragment] :
       {std::pair<std::string, std::string>{many, "hosts line 65537: more than 65536 hosts"},
        {many.substr(0, many.find("h65535 ")) + "h0 slots=1\n", "hosts line 65536: host \"h0\" is listed twice"}}) {
    try {
      parse_hostfile(text, "hosts");
      ADD_FAILURE() << "accepted: " << fragment;
    } catch (const zero::Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
}

TEST(LaunchPlan, LocalRun) {
  LaunchOptions o = base();
  o.num_procs = 3;
  LaunchPlan p = plan_launch(o);
  EXPECT_EQ(shell_join(p.argv), "mpirun --bind-to none --mca odls_base_signal_direct_children_only 1 -np 3 " + kLocalEnv + " " + kWrapped);
  EXPECT_TRUE(p.warnings.empty());
}

TEST(LaunchPlan, RootAndOversubscription) {
  LaunchOptions o = base();
  o.num_procs = 4;
  o.local_cpus = 2;
  o.as_root = true;
  LaunchPlan p = plan_launch(o);
  EXPECT_EQ(shell_join(p.argv),
            "mpirun --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 --bind-to none --mca odls_base_signal_direct_children_only 1 -np 4 " + kLocalEnv + " " + kWrapped);
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_NE(p.warnings[0].find("oversubscribing"), std::string::npos);
}

TEST(LaunchPlan, EnvLogDirAndQuoting) {
  LaunchOptions o = base();
  o.num_procs = 2;
  o.env = {{"NCCL_DEBUG", "INFO"}, {"MSG", "hello world"}};
  o.log_dir = "/tmp/logs";
  o.master_port = 1234;
  o.program = {"./train", "it's"};
  EXPECT_EQ(shell_join(plan_launch(o).argv),
            "mpirun --bind-to none --mca odls_base_signal_direct_children_only 1 -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=1234 -x NCCL_DEBUG=INFO -x 'MSG=hello "
            "world' "
            "/bin/zero-run --rank-wrapper --status-dir /tmp/s --log-dir /tmp/logs -- ./train 'it'\\''s'");
}

TEST(LaunchPlan, HostfileUsesEveryHost) {
  LaunchPlan p = plan_launch(with_hostfile());
  EXPECT_EQ(p.total_procs, 10);
  EXPECT_EQ(shell_join(p.argv),
            "mpirun --bind-to none --mca odls_base_signal_direct_children_only 1"
            " -np 4 -H worker-1:4 -x CUDA_VISIBLE_DEVICES=0,1,2,3 " +
                kClusterEnv + " " + kWrapped + " : -np 4 -H worker-2:4 -x CUDA_VISIBLE_DEVICES=0,1,2,3 " + kClusterEnv +
                " " + kWrapped + " : -np 2 -H worker-3:2 -x CUDA_VISIBLE_DEVICES=0,1 " + kClusterEnv + " " + kWrapped);
}

TEST(LaunchPlan, IncludeHostsAndSlots) {
  LaunchOptions o = with_hostfile();
  o.include = "worker-1@worker-2:0,2";
  LaunchPlan p = plan_launch(o);
  EXPECT_EQ(p.total_procs, 6);
  EXPECT_EQ(shell_join(p.argv),
            "mpirun --bind-to none --mca odls_base_signal_direct_children_only 1"
            " -np 4 -H worker-1:4 -x CUDA_VISIBLE_DEVICES=0,1,2,3 " +
                kClusterEnv + " " + kWrapped + " : -np 2 -H worker-2:2 -x CUDA_VISIBLE_DEVICES=0,2 " + kClusterEnv +
                " " + kWrapped);
}

TEST(LaunchPlan, ExcludeHostAndSlots) {
  LaunchOptions o = with_hostfile();
  o.exclude = "worker-1@worker-3:1";
  LaunchPlan p = plan_launch(o);
  ASSERT_EQ(p.hosts.size(), 2u);
  EXPECT_EQ(p.hosts[0].host, "worker-2");
  EXPECT_EQ(p.hosts[1].slots, std::vector<int>{0});
  EXPECT_EQ(p.total_procs, 5);
  EXPECT_NE(shell_join(p.argv).find("-x MASTER_ADDR=worker-2"), std::string::npos);
}

TEST(LaunchPlan, NumNodesAndNumGpus) {
  LaunchOptions o = with_hostfile();
  o.num_nodes = 2;
  o.num_gpus = 2;
  LaunchPlan p = plan_launch(o);
  EXPECT_EQ(p.total_procs, 4);
  EXPECT_EQ(p.hosts[1].slots, (std::vector<int>{0, 1}));
}

TEST(LaunchPlan, NumProcsCutsAHostfile) {
  LaunchOptions o = with_hostfile();
  o.num_procs = 6;
  LaunchPlan p = plan_launch(o);
  ASSERT_EQ(p.hosts.size(), 2u);
  EXPECT_EQ(p.hosts[1].slots.size(), 2u);
}

TEST(LaunchPlan, IncludeOnLocalhost) {
  LaunchOptions o = base();
  o.num_procs = 4;
  o.include = "localhost:1,3";
  LaunchPlan p = plan_launch(o);
  EXPECT_EQ(shell_join(p.argv),
            "mpirun --bind-to none --mca odls_base_signal_direct_children_only 1 -np 2 -H localhost:2 -x CUDA_VISIBLE_DEVICES=1,3 " + kLocalEnv + " " + kWrapped);
}

TEST(LaunchPlan, BadRequestsNameTheFlag) {
  struct Bad {
    const char* name;
    std::function<void(LaunchOptions&)> edit;
    const char* fragment;
  };
  const Bad cases[] = {
      {"no_program", [](LaunchOptions& o) { o.program.clear(); }, "no program"},
      {"include_and_exclude",
       [](LaunchOptions& o) {
         o.include = "worker-1";
         o.exclude = "worker-2";
       },
       "cannot be used together"},
      {"unknown_host", [](LaunchOptions& o) { o.include = "worker-9"; }, "host \"worker-9\" is not in the hostfile"},
      {"unknown_slot", [](LaunchOptions& o) { o.include = "worker-3:0,5"; }, "has no slot 5"},
      {"bad_slot", [](LaunchOptions& o) { o.exclude = "worker-3:x"; }, "bad slot \"x\""},
      {"host_twice", [](LaunchOptions& o) { o.include = "worker-1@worker-1"; }, "named twice"},
      {"empty_host", [](LaunchOptions& o) { o.include = "@worker-1"; }, "empty host name"},
      {"exclude_everything", [](LaunchOptions& o) { o.exclude = "worker-1@worker-2@worker-3"; }, "no hosts left"},
      {"too_many_nodes", [](LaunchOptions& o) { o.num_nodes = 4; }, "--num_nodes 4"},
      {"too_many_gpus", [](LaunchOptions& o) { o.num_gpus = 3; }, "host \"worker-3\" has 2 slot(s)"},
      {"num_nodes_with_include",
       [](LaunchOptions& o) {
         o.num_nodes = 1;
         o.include = "worker-1";
       },
       "cannot be combined"},
      {"too_many_procs", [](LaunchOptions& o) { o.num_procs = 11; }, "-n 11"},
  };
  for (const Bad& b : cases) {
    LaunchOptions o = with_hostfile();
    b.edit(o);
    try {
      plan_launch(o);
      ADD_FAILURE() << b.name << " accepted";
    } catch (const zero::Error& e) {
      EXPECT_NE(std::string(e.what()).find(b.fragment), std::string::npos) << b.name << ": " << e.what();
    }
  }
  LaunchOptions local = base();
  EXPECT_THROW(plan_launch(local), zero::Error);  // no -n and no hostfile
}

TEST(EnvFile, ParsesAndRejects) {
  auto env = parse_env_file("# c\nNCCL_IB_DISABLE=1\n\nPATHS=/a:/b=c\n", ".deepspeed_env");
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[1].second, "/a:/b=c");
  EXPECT_THROW(parse_env_file("JUSTAKEY\n", ".deepspeed_env"), zero::Error);
}

TEST(RankStatus, FirstFailurePrefersExitsOverSignals) {
  std::vector<RankFailure> f = {{0, true, 15, 100}, {2, false, 3, 200}, {1, false, 1, 300}};
  ASSERT_NE(first_failure(f), nullptr);
  EXPECT_EQ(first_failure(f)->rank, 2);
  EXPECT_EQ(describe(*first_failure(f)), "rank 2 exited with status 3");
  EXPECT_EQ(first_failure({}), nullptr);
}
