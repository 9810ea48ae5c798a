#include "launch/rank_status.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "launch/start_markers.h"

namespace zero::launch {
namespace {

pid_t g_child = -1;  // the wrapped program (leader of its own process group), for the signal handler

// Signals go to the program's whole process group, as a terminal's Ctrl-C would (a script's
// children stop too). SIGUSR1 is zero-run's "stop please", forwarded by mpirun: it becomes SIGINT.
void forward_signal(int signal_number) {
  if (g_child > 0) kill(-g_child, signal_number == SIGUSR1 ? SIGINT : signal_number);
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    data += w;
    n -= static_cast<size_t>(w);
  }
}

void record_rank_failure(const std::string& dir, const RankFailure& f) {
  std::ofstream out(dir + "/rank." + std::to_string(f.rank) + ".status");
  out << f.rank << ' ' << (f.signaled ? "signal" : "exit") << ' ' << f.code << ' ' << f.time_ns << ' '
      << (f.host.empty() ? "-" : f.host) << '\n';
}

std::vector<RankFailure> read_rank_failures(const std::string& dir) {
  std::vector<RankFailure> failures;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".status") continue;
    std::ifstream in(entry.path());
    RankFailure f;
    std::string kind;
    if (in >> f.rank >> kind >> f.code >> f.time_ns) {
      f.signaled = kind == "signal";
      if (in >> f.host && f.host == "-") f.host.clear();
      failures.push_back(f);
    }
  }
  return failures;
}

const RankFailure* first_failure(const std::vector<RankFailure>& failures) {
  const RankFailure* best = nullptr;
  for (const auto& f : failures) {
    if (!best || (best->signaled && !f.signaled) || (best->signaled == f.signaled && f.time_ns < best->time_ns))
      best = &f;
  }
  return best;
}

std::string describe(const RankFailure& f) {
  const std::string who = f.host.empty() ? fmt::format("rank {}", f.rank) : fmt::format("rank {} on {}", f.rank, f.host);
  if (f.signaled) return fmt::format("{} was killed by signal {} ({})", who, f.code, strsignal(f.code));
  return fmt::format("{} exited with status {}", who, f.code);
}

int rank_from_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return -1;
}

int run_rank_wrapper(const std::string& status_dir, const std::string& log_dir,
                     const std::vector<std::string>& program) {
  const int rank = rank_from_environment();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  if (!status_dir.empty()) {  // under zero-run: tell it this rank has started (start_markers.h)
    const std::string marker = start_marker(rank, host);
    write_all(STDERR_FILENO, marker.data(), marker.size());
  }
  int log_fd = -1;
  if (!log_dir.empty()) {
    std::filesystem::create_directories(log_dir);
    std::string path = fmt::format("{}/rank.{}.log", log_dir, rank);
    log_fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) fmt::print(stderr, "zero-run: rank {}: cannot write the log {}: {}\n", rank, path, strerror(errno));
  }
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (log_fd >= 0 && (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0)) {
    fmt::print(stderr, "zero-run: rank {}: pipe failed: {}\n", rank, strerror(errno));
    return 1;
  }
  g_child = fork();
  if (g_child == 0) {
    setpgid(0, 0);
    // If mpirun kills this wrapper (SIGKILL on abort reaches only direct children), the program
    // must not live on as an orphan.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) _exit(137);
    if (log_fd >= 0) {
      dup2(out_pipe[1], STDOUT_FILENO);
      dup2(err_pipe[1], STDERR_FILENO);
    }
    std::vector<char*> args;
    for (const auto& a : program) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    fmt::print(stderr, "zero-run: rank {}: cannot run {}: {}\n", rank, program[0], strerror(errno));
    _exit(127);
  }
  if (g_child < 0) {
    fmt::print(stderr, "zero-run: rank {}: fork failed: {}\n", rank, strerror(errno));
    return 1;
  }
  setpgid(g_child, g_child);  // also here: the handler may run before the child has done it
  struct sigaction action {};
  action.sa_handler = forward_signal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
  if (log_fd >= 0) {  // copy the child's stdout and stderr to ours and to the log until both close
    close(out_pipe[1]);
    close(err_pipe[1]);
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    const int targets[2] = {STDOUT_FILENO, STDERR_FILENO};
    int open_count = 2;
    char buffer[65536];
    while (open_count > 0) {
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          close(fds[i].fd);
          fds[i].fd = -1;
          --open_count;
          continue;
        }
        write_all(targets[i], buffer, static_cast<size_t>(n));
        write_all(log_fd, buffer, static_cast<size_t>(n));
      }
    }
  }
  int status = 0;
  while (waitpid(g_child, &status, 0) < 0 && errno == EINTR) {
  }
  if (log_fd >= 0) close(log_fd);
  RankFailure failure{rank, WIFSIGNALED(status), WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
                      now_ns(), host};
  if (failure.code == 0) return 0;
  if (!status_dir.empty()) record_rank_failure(status_dir, failure);
  return failure.signaled ? 128 + failure.code : failure.code;
}

}  // namespace zero::launch
