#include "launch/slurm_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "zero/error.h"

namespace zero::launch {
namespace {

// Splits at top-level commas (not those inside [...]).
std::vector<std::string> split_top_level(const std::string& list, const std::string& origin) {
  std::vector<std::string> items;
  std::string item;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) break;
    if (c == ',' && depth == 0) {
      items.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  if (depth != 0) throw Error("host list \"" + list + "\": unbalanced [ ]", origin);
  items.push_back(item);
  return items;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// One name with bracket groups: "rack[1-2]-n[01-02]" -> rack1-n01 rack1-n02 rack2-n01 rack2-n02.
void expand_name(const std::string& name, const std::string& list, std::vector<std::string>& out) {
  const size_t open = name.find('[');
  if (open == std::string::npos) {
    if (name.empty()) throw Error("host list \"" + list + "\": an empty host name", "SLURM_JOB_NODELIST");
    out.push_back(name);
    return;
  }
  const size_t close = name.find(']', open);
  const std::string prefix = name.substr(0, open), rest = name.substr(close + 1);
  for (const std::string& range : split_top_level(name.substr(open + 1, close - open - 1), "SLURM_JOB_NODELIST")) {
    const size_t dash = range.find('-');
    const std::string first = range.substr(0, dash), last = dash == std::string::npos ? first : range.substr(dash + 1);
    if (!all_digits(first) || !all_digits(last) || first.size() > 9 || last.size() > 9) {
      throw Error("host list \"" + list + "\": \"" + range + "\" is not a number or a range a-b", "SLURM_JOB_NODELIST");
    }
    const long lo = std::atol(first.c_str()), hi = std::atol(last.c_str());
    if (hi < lo) throw Error("host list \"" + list + "\": range " + range + " runs backwards", "SLURM_JOB_NODELIST");
    for (long i = lo; i <= hi; ++i) {
      // Slurm keeps the zero padding of the range's first number: node[08-10] -> node08 .. node10.
      expand_name(prefix + fmt::format("{:0{}}", i, first.size()) + rest, list, out);
    }
  }
}

// The hosts a --include/--exclude spec names ("h1@h2"); Slurm places tasks, so slots are refused.
std::vector<std::string> whole_hosts(const std::string& spec, const char* flag, const SlurmAllocation& a) {
  std::vector<std::string> hosts;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t at = spec.find('@', start);
    if (at == std::string::npos) at = spec.size();
    const std::string host = spec.substr(start, at - start);
    if (host.find(':') != std::string::npos) {
      throw Error(fmt::format("{} {}: Slurm places the tasks on a node itself, so name whole hosts (no :slots), "
                              "or use --launcher openmpi with a hostfile",
                              flag, spec),
                  flag);
    }
    if (std::find(a.nodes.begin(), a.nodes.end(), host) == a.nodes.end()) {
      throw Error(fmt::format("{} {}: host \"{}\" is not in Slurm job {}'s allocation ({})", flag, spec, host,
                              a.job_id, fmt::join(a.nodes, ",")),
                  flag);
    }
    hosts.push_back(host);
    start = at + 1;
  }
  return hosts;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> hosts;
  for (const std::string& item : split_top_level(list, "SLURM_JOB_NODELIST")) expand_name(item, list, hosts);
  return hosts;
}

SlurmAllocation slurm_allocation(const std::function<const char*(const char*)>& getenv) {
  SlurmAllocation a;
  const char* job = getenv("SLURM_JOB_ID");
  if (!job || !*job) return a;
  a.job_id = job;
  const char* nodes = getenv("SLURM_JOB_NODELIST");
  if (!nodes || !*nodes) throw Error("SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not", "SLURM_JOB_NODELIST");
  a.nodes = expand_hostlist(nodes);
  if (const char* n = getenv("SLURM_NTASKS"); n && *n) {
    if (!all_digits(n) || std::atoi(n) < 1) throw Error(fmt::format("SLURM_NTASKS={}: not a count", n), "SLURM_NTASKS");
    a.ntasks = std::atoi(n);
  }
  return a;
}

std::vector<std::string> split_launcher_args(const std::string& args) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (char c : args) {
    if (quote) {
      if (c == quote) quote = 0;
      else word += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote) throw Error("--launcher_args \"" + args + "\": a quote is not closed", "--launcher_args");
  if (in_word) words.push_back(word);
  return words;
}

LaunchPlan plan_srun(const LaunchOptions& o, const SlurmAllocation& a) {
  if (o.program.empty()) throw Error("no program to run: zero-run PROGRAM [ARGS...]", "PROGRAM");
  if (!o.hostfile.empty()) {
    throw Error(fmt::format("--hostfile {} inside Slurm job {}: srun places the ranks on the allocation's nodes "
                            "({}); leave out --hostfile, or use --launcher openmpi",
                            o.hostfile, a.job_id, fmt::join(a.nodes, ",")),
                "--hostfile");
  }
  if (!o.include.empty() && !o.exclude.empty())
    throw Error("--include and --exclude cannot be used together", "--include");
  if ((o.num_nodes >= 0 || o.num_gpus >= 0) && (!o.include.empty() || !o.exclude.empty())) {
    throw Error("--num_nodes/--num_gpus cannot be combined with --include/--exclude (as in DeepSpeed)", "--num_nodes");
  }
  LaunchPlan plan;
  std::vector<std::string> nodes = a.nodes;
  // Note: srun's own flags, not DeepSpeed's: --kill-on-bad-exit ends every task when one fails
  // (as mpirun does); --cpu-bind=none as mpirun's --bind-to none (ranks choose their threads).
  std::vector<std::string> srun = {o.srun, "--mpi=pmix", "--kill-on-bad-exit=1", "--cpu-bind=none"};
  if (o.num_procs >= 0) {
    if (o.num_procs < 1) throw Error(fmt::format("-n {}: at least one process", o.num_procs), "-n");
    srun.insert(srun.end(), {"-n", std::to_string(o.num_procs)});
  }
  if (o.num_nodes >= 0) {
    if (o.num_nodes < 1 || o.num_nodes > static_cast<int>(nodes.size())) {
      throw Error(fmt::format("--num_nodes {}: Slurm job {} has {} node(s)", o.num_nodes, a.job_id, nodes.size()),
                  "--num_nodes");
    }
    nodes.resize(static_cast<size_t>(o.num_nodes));
    srun.insert(srun.end(), {"--nodes", std::to_string(o.num_nodes)});
  }
  if (o.num_gpus >= 0) {
    if (o.num_gpus < 1) throw Error(fmt::format("--num_gpus {}: at least one per node", o.num_gpus), "--num_gpus");
    srun.insert(srun.end(), {"--ntasks-per-node", std::to_string(o.num_gpus)});
  }
  if (!o.include.empty()) {
    nodes = whole_hosts(o.include, "--include", a);
    srun.insert(srun.end(), {"--nodelist", fmt::format("{}", fmt::join(nodes, ","))});
  }
  if (!o.exclude.empty()) {
    const std::vector<std::string> out = whole_hosts(o.exclude, "--exclude", a);
    std::erase_if(nodes, [&](const std::string& h) { return std::find(out.begin(), out.end(), h) != out.end(); });
    if (nodes.empty()) throw Error("no hosts left to run on after --exclude " + o.exclude, "--exclude");
    srun.insert(srun.end(), {"--exclude", fmt::format("{}", fmt::join(out, ","))});
  }
  srun.insert(srun.end(), o.launcher_args.begin(), o.launcher_args.end());
  for (const auto& h : nodes) plan.hosts.push_back({h, {}});
  // srun's count: -n; else tasks per node on every node used; else the allocation's -n; else one per node.
  plan.total_procs = o.num_procs >= 0   ? o.num_procs
                     : o.num_gpus >= 0  ? o.num_gpus * static_cast<int>(nodes.size())
                     : a.ntasks > 0 && o.num_nodes < 0 && o.include.empty() && o.exclude.empty()
                         ? a.ntasks
                         : static_cast<int>(nodes.size());

  // srun passes zero-run's whole environment on (--export=ALL): `env` sets what the ranks need,
  // values with commas included (srun's --export=K=V would split them).
  plan.argv = {"env", "MASTER_ADDR=" + (o.master_addr.empty() ? nodes.front() : o.master_addr),
               "MASTER_PORT=" + std::to_string(o.master_port)};
  for (const auto& [key, value] : o.env) plan.argv.push_back(key + "=" + value);
  plan.argv.insert(plan.argv.end(), srun.begin(), srun.end());
  const std::vector<std::string> command = rank_command(o);
  plan.argv.insert(plan.argv.end(), command.begin(), command.end());
  return plan;
}

}  // namespace zero::launch
