// zero-run — DeepSpeed-style launcher over mpirun.
//
//   zero-run -n 4 ./train --config ds.json
//   zero-run --hostfile hosts --include "worker-1@worker-2:0,2" ./train ...
//   sbatch -N 2 --ntasks-per-node 4 --wrap "zero-run ./train ..."   (srun inside the allocation)
//
// Each rank runs under zero-run's own rank wrapper, which records a failing rank's exit status,
// so zero-run can say which rank failed first; --log-dir also keeps one log per rank.
#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "launch/launch_plan.h"
#include "launch/rank_status.h"
#include "launch/slurm_plan.h"
#include "launch/start_markers.h"
#include "zero/error.h"

namespace {

pid_t g_mpirun = -1;  // mpirun, or srun inside a Slurm allocation
bool g_srun = false;
volatile sig_atomic_t g_interrupt_again = 0;  // srun: a second SIGINT is due (it kills on two within 1 s)
volatile sig_atomic_t g_stopped_by = 0;  // the first signal the user sent us, if any
int g_stop_grace_s = 60;

// The first Ctrl-C (or SIGTERM) asks every rank to stop: SIGUSR1 to mpirun, which forwards it to
// the rank wrappers, which give their programs SIGINT (zero-train then saves and exits). A second
// one, or the grace period running out (SIGALRM), makes mpirun kill the job.
void on_signal(int signal_number) {
  if (g_mpirun <= 0) return;
  if (g_stopped_by == 0 && signal_number != SIGALRM) {
    g_stopped_by = signal_number;
    static const char kNote[] = "\nzero-run: asking every rank to stop (again to kill the job)\n";
    (void)!write(STDERR_FILENO, kNote, sizeof kNote - 1);
    kill(g_mpirun, SIGUSR1);
    alarm(static_cast<unsigned>(g_stop_grace_s));
    return;
  }
  kill(g_mpirun, SIGINT);
  if (g_srun) g_interrupt_again = 1;
}

// The .deepspeed_env files DeepSpeed reads: $DS_ENV_FILE, ~/.deepspeed_env, ./.deepspeed_env.
std::vector<std::pair<std::string, std::string>> read_env_files() {
  std::vector<std::string> paths;
  if (const char* explicit_file = std::getenv("DS_ENV_FILE")) paths.push_back(explicit_file);
  if (const char* home = std::getenv("HOME")) paths.push_back(std::string(home) + "/.deepspeed_env");
  paths.push_back(".deepspeed_env");
  std::vector<std::pair<std::string, std::string>> env;
  for (const auto& path : paths) {
    std::ifstream in(path);
    if (!in) continue;
    std::ostringstream text;
    text << in.rdbuf();
    auto entries = zero::launch::parse_env_file(text.str(), path);
    env.insert(env.end(), entries.begin(), entries.end());
  }
  return env;
}

// Once a rank has failed (or the launch timed out), mpirun gets this long to end the others
// before zero-run ends mpirun. Note: mpirun waits for every host's daemon to confirm, and a
// daemon behind a dead link never does: without this the job would hang after its ranks had all
// stopped.
constexpr int kFailureGraceSeconds = 15;

struct JobEnd {
  int status = 0;
  std::map<int, std::string> started;  // rank -> host, from the rank wrappers' start markers
  bool launch_timed_out = false;
};

// Copies what the launcher's stderr holds now to ours, less the start markers. Returns false at
// its end. Never waits: a launch agent that outlives a killed mpirun may hold the pipe open.
bool relay_stderr(int fd, zero::launch::StartMarkerFilter& filter) {
  char buffer[65536];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return true;
    if (n == 0) return false;
    const std::string passed = filter.feed({buffer, static_cast<size_t>(n)});
    zero::launch::write_all(STDERR_FILENO, passed.data(), passed.size());
  }
}

std::string join_ints(const std::vector<int>& values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

// Where ranks never started: the hosts (mpirun's placement) or, under srun, the ranks.
std::string where_not_started(const zero::launch::LaunchPlan& plan, const std::map<int, std::string>& started) {
  const auto hosts = zero::launch::hosts_not_started(plan.hosts, started);
  std::string names;
  for (const auto& h : hosts) names += (names.empty() ? "" : ", ") + h;
  if (g_srun || hosts.empty()) {
    return "ranks " + join_ints(zero::launch::ranks_not_started(plan.total_procs, started)) + " did not start";
  }
  if (started.empty() && hosts.size() > 1) {
    // Note: mpirun starts no rank before every other host's daemon has called back, so one silent
    // host keeps them all from starting; which one, mpirun does not say. This host needs no daemon.
    char self[256] = {};
    gethostname(self, sizeof self - 1);
    std::string remote;
    for (const auto& h : hosts) {
      if (h != self && h != "localhost" && h != "127.0.0.1") remote += (remote.empty() ? "" : ", ") + h;
    }
    return "no rank started on any host: mpirun starts them once the daemon of every other host (" + remote +
           ") has called back, and one has not";
  }
  return "no rank started on " + names;
}

// The processes mpirun started itself: on a launch that hangs, the ssh (rsh agent) still trying
// to reach a host. They would outlive a killed mpirun.
void kill_children_of(pid_t parent) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t after_name = line.rfind(')');
    if (after_name == std::string::npos) continue;
    std::istringstream fields(line.substr(after_name + 2));
    char state = 0;
    pid_t ppid = 0;
    if (fields >> state >> ppid && ppid == parent) kill(static_cast<pid_t>(std::stol(entry.path().filename())), SIGKILL);
  }
}

JobEnd run_launcher(const zero::launch::LaunchPlan& plan, const std::string& status_dir, int launch_timeout_s) {
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) throw zero::Error(std::string("pipe failed: ") + strerror(errno), "mpirun");
  g_mpirun = fork();
  if (g_mpirun == 0) {
    dup2(err_pipe[1], STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : plan.argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    fmt::print(stderr, "zero-run: cannot run {}: {} (is {} installed?)\n", plan.argv[0], strerror(errno),
               g_srun ? "Slurm" : "OpenMPI");
    _exit(127);
  }
  if (g_mpirun < 0) throw zero::Error(std::string("fork failed: ") + strerror(errno), "mpirun");
  close(err_pipe[1]);
  fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGALRM, &action, nullptr);
  zero::launch::StartMarkerFilter filter;
  JobEnd end;
  int status = 0;
  const auto launched = std::chrono::steady_clock::now();
  auto ending_since = std::chrono::steady_clock::time_point::max();  // a rank failed, or the launch timed out
  bool killed = false, pipe_open = true;
  for (;;) {
    const pid_t done = waitpid(g_mpirun, &status, WNOHANG);
    if (done == g_mpirun || (done < 0 && errno != EINTR)) break;
    if (g_interrupt_again) {
      usleep(300 * 1000);
      kill(g_mpirun, SIGINT);
      g_interrupt_again = 0;
    }
    const auto now = std::chrono::steady_clock::now();
    if (ending_since == std::chrono::steady_clock::time_point::max()) {
      if (!zero::launch::read_rank_failures(status_dir).empty()) ending_since = now;
      const bool all_started = static_cast<int>(filter.started().size()) >= plan.total_procs;
      if (!all_started && launch_timeout_s > 0 && now - launched > std::chrono::seconds(launch_timeout_s)) {
        fmt::print(stderr, "zero-run: {} of {} rank(s) had not started {} s after the launch: {}. Is every host up, "
                   "reachable, and able to reach this one? Ending the job (--launch-timeout)\n",
                   plan.total_procs - static_cast<int>(filter.started().size()), plan.total_procs, launch_timeout_s,
                   where_not_started(plan, filter.started()));
        end.launch_timed_out = true;
        ending_since = now;
        if (!g_srun) kill_children_of(g_mpirun);
        kill(g_mpirun, SIGINT);
        if (g_srun) g_interrupt_again = 1;  // srun ends a step on two SIGINTs within a second
      }
    } else if (!killed && now - ending_since > std::chrono::seconds(kFailureGraceSeconds)) {
      fmt::print(stderr, "zero-run: {} has not ended the job {} s after a rank failed or the launch timed out (a host "
                 "unreachable?): killing it\n",
                 g_srun ? "srun" : "mpirun", kFailureGraceSeconds);
      if (end.launch_timed_out && !g_srun) kill_children_of(g_mpirun);
      kill(g_mpirun, SIGKILL);
      killed = true;
    }
    pollfd wait_for_output{err_pipe[0], POLLIN, 0};
    if (pipe_open && poll(&wait_for_output, 1, 200) > 0) {
      pipe_open = relay_stderr(err_pipe[0], filter);
    } else if (!pipe_open) {
      usleep(200 * 1000);
    }
  }
  if (pipe_open) relay_stderr(err_pipe[0], filter);
  const std::string held = filter.flush();
  zero::launch::write_all(STDERR_FILENO, held.data(), held.size());
  close(err_pipe[0]);
  end.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  end.started = filter.started();
  return end;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--rank-wrapper") {
    std::string status_dir, log_dir;
    int i = 2;
    for (; i < argc && std::string(argv[i]) != "--"; i += 2) {
      if (i + 1 >= argc) break;
      if (std::string(argv[i]) == "--status-dir") status_dir = argv[i + 1];
      if (std::string(argv[i]) == "--log-dir") log_dir = argv[i + 1];
    }
    std::vector<std::string> program(argv + std::min(i + 1, argc), argv + argc);
    if (program.empty()) {
      fmt::print(stderr, "zero-run --rank-wrapper: no program\n");
      return 2;
    }
    return zero::launch::run_rank_wrapper(status_dir, log_dir, program);
  }

  CLI::App app{"zero-run: launch a program on N ranks with mpirun (DeepSpeed launcher flags)"};
  app.prefix_command();  // everything from PROGRAM on belongs to the program
  zero::launch::LaunchOptions o;
  std::vector<std::string> env_flags;
  bool dry_run = false;
  app.add_option("-n,--np", o.num_procs, "number of processes on this machine (or the first N slots of a hostfile)");
  app.add_option("-H,--hostfile", o.hostfile, "DeepSpeed hostfile: lines 'HOST slots=N'")->check(CLI::ExistingFile);
  app.add_option("--num_nodes", o.num_nodes, "use the first N hosts of the hostfile");
  app.add_option("--num_gpus", o.num_gpus, "slots (GPUs) per host to use");
  app.add_option("-i,--include", o.include, "hosts/slots to use, e.g. 'worker-1@worker-2:0,2'");
  app.add_option("-e,--exclude", o.exclude, "hosts/slots to leave out, same syntax");
  app.add_option("--master_addr", o.master_addr, "exported as MASTER_ADDR (default: first host)");
  app.add_option("--master_port", o.master_port, "exported as MASTER_PORT")->check(CLI::Range(1, 65535));
  app.add_option("--env", env_flags, "KEY=VALUE exported to every rank (repeatable)")
      ->allow_extra_args(false);  // one KEY=VALUE per --env: the program's arguments follow
  app.add_option("--log-dir", o.log_dir, "write each rank's output to DIR/rank.N.log as well");
  app.add_option("--stop-grace", g_stop_grace_s, "seconds the ranks get to stop after Ctrl-C before the job is killed")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  double collective_timeout = -1;
  app.add_option("--timeout", collective_timeout,
                 "seconds a collective may wait before every waiting rank ends the job with an error naming the ranks "
                 "that did not arrive (default: the config's zerocpp.collective_timeout, 1800; 0: never)")
      ->check(CLI::NonNegativeNumber);
  std::string launcher, launcher_args;
  app.add_option("--launcher", launcher,
                 "openmpi (mpirun) or slurm (srun); default: slurm inside a Slurm allocation without --hostfile")
      ->check(CLI::IsMember({"openmpi", "slurm"}));
  app.add_option("--launcher_args", launcher_args, "extra words for mpirun or srun, e.g. '--partition gpu'");
  int launch_timeout = 120;
  app.add_option("--launch-timeout", launch_timeout,
                 "seconds every rank gets to start (a host that cannot be reached hangs the launch); 0: wait forever")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--dry-run", dry_run, "print the mpirun (or srun) command and exit");
  CLI11_PARSE(app, argc, argv);
  o.program = app.remaining();

  try {
    if (!o.hostfile.empty()) o.hostfile_hosts = zero::launch::read_hostfile(o.hostfile);
    // Ranks write to a pseudo-terminal of mpirun's even when zero-run's output is a pipe: tell
    // them what the user's end is (zero-train draws its progress bar only on a terminal).
    o.env = {{"ZERO_STDOUT_IS_TTY", isatty(STDOUT_FILENO) ? "1" : "0"}};
    // The bf16 compute path (docs/precision.md) must reach the ranks on other hosts too.
    if (const char* path = std::getenv("ZERO_BF16_COMPUTE"); path && *path) o.env.emplace_back("ZERO_BF16_COMPUTE", path);
    for (auto& entry : read_env_files()) o.env.push_back(std::move(entry));
    if (collective_timeout >= 0) o.env.emplace_back("ZERO_COLLECTIVE_TIMEOUT", fmt::format("{}", collective_timeout));
    for (const auto& kv : env_flags) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) throw zero::Error("--env " + kv + ": expected KEY=VALUE", "--env");
      o.env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    }
    o.as_root = geteuid() == 0;
    o.local_cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    o.self = std::filesystem::read_symlink("/proc/self/exe").string();
    if (!o.log_dir.empty()) o.log_dir = std::filesystem::absolute(o.log_dir).string();
    char status_template[] = "/tmp/zero-run.XXXXXX";
    if (dry_run) {
      o.status_dir = "/tmp/zero-run.XXXXXX";
    } else if (mkdtemp(status_template)) {
      o.status_dir = status_template;
    } else {
      throw zero::Error(std::string("cannot create a status directory in /tmp: ") + strerror(errno), "/tmp");
    }
    o.launcher_args = zero::launch::split_launcher_args(launcher_args);
    const auto allocation = zero::launch::slurm_allocation([](const char* name) { return std::getenv(name); });
    if (launcher.empty()) launcher = !allocation.job_id.empty() && o.hostfile.empty() ? "slurm" : "openmpi";
    if (launcher == "slurm" && allocation.job_id.empty()) {
      throw zero::Error("--launcher slurm: not inside a Slurm allocation (no SLURM_JOB_ID): run zero-run from sbatch "
                        "or salloc", "--launcher");
    }
    g_srun = launcher == "slurm";
    zero::launch::LaunchPlan plan = g_srun ? zero::launch::plan_srun(o, allocation) : zero::launch::plan_launch(o);
    for (const auto& w : plan.warnings) fmt::print(stderr, "zero-run: warning: {}\n", w);
    if (dry_run) {
      fmt::print("{}\n", zero::launch::shell_join(plan.argv));
      return 0;
    }
    const JobEnd job = run_launcher(plan, o.status_dir, launch_timeout);
    const int status = job.status;
    auto failures = zero::launch::read_rank_failures(o.status_dir);
    if (plan.hosts.size() == 1) {
      for (auto& f : failures) f.host.clear();  // one host: "rank 1", as ever
    }
    std::filesystem::remove_all(o.status_dir);
    if (const auto* first = zero::launch::first_failure(failures)) {
      fmt::print(stderr, "zero-run: {}; {} of {} rank(s) failed or were stopped\n", zero::launch::describe(*first),
                 failures.size(), plan.total_procs);
      return first->signaled ? 128 + first->code : first->code;
    }
    if (g_stopped_by != 0) {
      fmt::print(stderr, "zero-run: stopped by {}{}\n", strsignal(g_stopped_by),
                 status == 0 ? "; every rank exited with status 0" : "");
      return 128 + g_stopped_by;
    }
    if (job.launch_timed_out) return 1;
    if (status != 0) {
      const bool all_started = static_cast<int>(job.started.size()) >= plan.total_procs;
      fmt::print(stderr, "zero-run: {} failed with status {}{}\n", g_srun ? "srun" : "mpirun", status,
                 all_started ? "" : "; " + where_not_started(plan, job.started));
    }
    return status;
  } catch (const zero::Error& e) {
    fmt::print(stderr, "zero-run: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // e.g. a LibTorch kernel missing for a dtype: one line, no abort
    fmt::print(stderr, "zero-run: {}\n", zero::first_line(e));
    return 2;
  }
}
