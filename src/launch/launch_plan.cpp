#include "launch/launch_plan.h"

#include <fmt/core.h>

#include <algorithm>

#include "zero/error.h"

namespace zero::launch {
namespace {

std::string join_slots(const std::vector<int>& slots) {
  std::string out;
  for (int s : slots) out += (out.empty() ? "" : ",") + std::to_string(s);
  return out;
}

bool is_first_slots(const HostSlots& h) {
  for (size_t i = 0; i < h.slots.size(); ++i) {
    if (h.slots[i] != static_cast<int>(i)) return false;
  }
  return true;
}

std::vector<HostSlots> select_hosts(const LaunchOptions& o, bool local) {
  std::vector<HostSlots> pool;
  if (local) {
    int n = o.num_procs >= 0 ? o.num_procs : o.num_gpus;
    if (n < 1) throw Error("give the number of processes: -n N (or --num_gpus N, or a --hostfile)", "-n");
    HostSlots h{"localhost", {}};
    for (int s = 0; s < n; ++s) h.slots.push_back(s);
    pool.push_back(h);
  } else {
    pool = o.hostfile_hosts;
  }
  if (!o.include.empty()) pool = apply_include(pool, o.include);
  if (!o.exclude.empty()) pool = apply_exclude(pool, o.exclude);
  if (o.num_nodes >= 0) {
    if (o.num_nodes < 1 || o.num_nodes > static_cast<int>(pool.size())) {
      throw Error(fmt::format("--num_nodes {}: the hostfile has {} host(s)", o.num_nodes, pool.size()), "--num_nodes");
    }
    pool.resize(static_cast<size_t>(o.num_nodes));
  }
  if (!local && o.num_gpus >= 0) {
    for (auto& h : pool) {
      if (o.num_gpus < 1 || o.num_gpus > static_cast<int>(h.slots.size())) {
        throw Error(fmt::format("--num_gpus {}: host \"{}\" has {} slot(s)", o.num_gpus, h.host, h.slots.size()),
                    "--num_gpus");
      }
      h.slots.resize(static_cast<size_t>(o.num_gpus));
    }
  }
  if (pool.empty()) throw Error("no hosts left to run on after --include/--exclude", "--exclude");
  if (!local && o.num_procs >= 0) {  // -n with a hostfile: the first N slots, in hostfile order
    int left = o.num_procs, total = 0;
    for (const auto& h : pool) total += static_cast<int>(h.slots.size());
    if (o.num_procs < 1 || o.num_procs > total) {
      throw Error(fmt::format("-n {}: the selected hosts have {} slot(s)", o.num_procs, total), "-n");
    }
    std::vector<HostSlots> cut;
    for (auto h : pool) {
      if (left == 0) break;
      if (static_cast<int>(h.slots.size()) > left) h.slots.resize(static_cast<size_t>(left));
      left -= static_cast<int>(h.slots.size());
      cut.push_back(h);
    }
    pool = cut;
  }
  return pool;
}

}  // namespace

std::vector<std::string> rank_command(const LaunchOptions& o) {
  std::vector<std::string> cmd = {o.self, "--rank-wrapper", "--status-dir", o.status_dir};
  if (!o.log_dir.empty()) {
    cmd.push_back("--log-dir");
    cmd.push_back(o.log_dir);
  }
  cmd.push_back("--");
  cmd.insert(cmd.end(), o.program.begin(), o.program.end());
  return cmd;
}

LaunchPlan plan_launch(const LaunchOptions& o) {
  if (o.program.empty()) throw Error("no program to run: zero-run -n N PROGRAM [ARGS...]", "PROGRAM");
  if (!o.include.empty() && !o.exclude.empty())
    throw Error("--include and --exclude cannot be used together", "--include");
  if ((o.num_nodes >= 0 || o.num_gpus >= 0) && (!o.include.empty() || !o.exclude.empty())) {
    throw Error("--num_nodes/--num_gpus cannot be combined with --include/--exclude (as in DeepSpeed)", "--num_nodes");
  }
  if (!o.hostfile.empty() && o.hostfile_hosts.empty())
    throw Error("hostfile " + o.hostfile + " has no hosts", o.hostfile);
  const bool local = o.hostfile.empty();
  LaunchPlan plan;
  plan.hosts = select_hosts(o, local);
  for (const auto& h : plan.hosts) plan.total_procs += static_cast<int>(h.slots.size());

  std::vector<std::string>& argv = plan.argv;
  argv.push_back(o.mpirun);
  if (o.as_root) argv.push_back("--allow-run-as-root");
  const bool single_context = local && plan.hosts.size() == 1 && is_first_slots(plan.hosts[0]);
  if (local && plan.total_procs > o.local_cpus) {
    // A rank waiting in a collective yields its core to one that works: OpenMPI busy-polls
    // otherwise: with 3 ranks on 2 cores the engine's tests took 5x as long (docs/launcher.md).
    argv.insert(argv.end(), {"--oversubscribe", "--mca", "mpi_yield_when_idle", "1"});
    plan.warnings.push_back(fmt::format("{} processes on {} core(s): oversubscribing; use one thread per rank",
                                        plan.total_procs, o.local_cpus));
  }
  // Note: ranks pick their own threads (one per rank here); MPI's default core binding would
  // pin several ranks' threads onto the cores it chose, or fail when oversubscribed.
  argv.insert(argv.end(), {"--bind-to", "none"});
  // Ctrl-C under zero-run is a graceful stop: mpirun forwards SIGUSR1 to the rank wrappers only
  // (not their children), and each wrapper turns it into SIGINT for its program's process group.
  argv.insert(argv.end(), {"--mca", "odls_base_signal_direct_children_only", "1"});
  argv.insert(argv.end(), o.launcher_args.begin(), o.launcher_args.end());

  std::vector<std::pair<std::string, std::string>> env = {
      {"MASTER_ADDR", o.master_addr.empty() ? (local ? "127.0.0.1" : plan.hosts[0].host) : o.master_addr},
      {"MASTER_PORT", std::to_string(o.master_port)}};
  env.insert(env.end(), o.env.begin(), o.env.end());
  const std::vector<std::string> command = rank_command(o);
  // One app context per host (OpenMPI applies -x per context), or one for a plain local run.
  for (size_t i = 0; i < plan.hosts.size(); ++i) {
    const HostSlots& h = plan.hosts[i];
    if (i > 0) argv.push_back(":");
    argv.insert(argv.end(),
                {"-np", std::to_string(single_context ? plan.total_procs : static_cast<int>(h.slots.size()))});
    if (!single_context) {
      argv.insert(argv.end(), {"-H", fmt::format("{}:{}", h.host, h.slots.size())});
      argv.insert(argv.end(), {"-x", "CUDA_VISIBLE_DEVICES=" + join_slots(h.slots)});
    }
    for (const auto& [key, value] : env) argv.insert(argv.end(), {"-x", key + "=" + value});
    argv.insert(argv.end(), command.begin(), command.end());
  }
  return plan;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) {
    bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) ||
             std::string_view("_-+=/.,:@%").find(c) != std::string_view::npos;
    });
    std::string quoted = "'";
    for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    out += (out.empty() ? "" : " ") + (plain ? arg : quoted);
  }
  return out;
}

}  // namespace zero::launch
