// How zero-run learns which rank failed first: each rank runs under zero-run's rank wrapper,
// which records a non-zero exit in a small status file; after mpirun returns, zero-run reads them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zero::launch {

struct RankFailure {
  int rank = -1;
  bool signaled = false;  // killed by a signal (often mpirun stopping the others) vs exited
  int code = 0;           // exit status or signal number
  int64_t time_ns = 0;    // wall clock when the wrapper saw it
  std::string host;       // where the rank ran (its host name), or empty
};

void record_rank_failure(const std::string& dir, const RankFailure& failure);
std::vector<RankFailure> read_rank_failures(const std::string& dir);
// The failure that started it: the earliest non-signal exit, else the earliest signal.
// Returns nullptr when the list is empty.
const RankFailure* first_failure(const std::vector<RankFailure>& failures);
std::string describe(const RankFailure& failure);

// Writes all n bytes to fd (retrying short and interrupted writes; gives up on an error).
void write_all(int fd, const char* data, size_t n);

// The rank of this process as the launcher told it (OpenMPI, PMI, PMIx, Slurm), or -1.
int rank_from_environment();

// Runs PROGRAM as a child: forwards SIGINT/SIGTERM to it, copies its output to ours and, when
// log_dir is set, to log_dir/rank.<R>.log; records a failure in status_dir. Returns the exit
// status to exit with (128 + signal for a signal).
int run_rank_wrapper(const std::string& status_dir, const std::string& log_dir,
                     const std::vector<std::string>& program);

}  // namespace zero::launch
