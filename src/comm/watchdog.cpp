#include "comm/watchdog.h"

#include <fmt/core.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/progress.h"
#include "zero/error.h"
#include "zero/world.h"

namespace zero::comm_detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kQuery = 1, kAnswer = 2;

// What one rank says about itself (sent as bytes between identical binaries).
struct Status {
  int32_t blocked = 0;
  int32_t unused = 0;
  int64_t step = 0;
  double seconds = 0;
  char what[32] = {};
};

Status my_status() {
  const ProgressSnapshot p = progress_snapshot();
  Status s;
  s.blocked = p.blocked ? 1 : 0;
  s.step = p.step;
  s.seconds = p.seconds;
  std::snprintf(s.what, sizeof s.what, "%s", p.what.c_str());
  return s;
}

struct Peer {
  bool heard = false;
  Status status;
  Clock::time_point when;
};

class MpiWatchdog : public Watchdog {
 public:
  // `hosts`: every rank's host when the world spans several (errors name them), else empty.
  MpiWatchdog(const WatchdogOptions& options, int rank, int size, bool threads, std::vector<std::string> hosts)
      : options_(options), rank_(rank), size_(size), threads_(threads), hosts_(std::move(hosts)),
        peers_(static_cast<size_t>(size)) {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    const double shortest = std::min(options_.timeout_seconds > 0 ? options_.timeout_seconds : 1e9,
                                     options_.warning_seconds > 0 ? options_.warning_seconds : 1e9);
    poll_ = std::clamp(shortest / 20, 0.05, 1.0);
    ask_after_ = shortest / 2;
    thread_ = std::thread([this] { run(); });
  }

  ~MpiWatchdog() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    for (auto& r : sends_) MPI_Wait(&r, MPI_STATUS_IGNORE);  // small eager messages: complete locally
    MPI_Comm_free(&comm_);
  }

 private:
  void run() {
    int64_t episode = -1, warned = -1;
    Clock::time_point last_ask;
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::duration<double>(poll_), [&] { return stop_; })) {
      if (threads_) receive();
      const ProgressSnapshot p = progress_snapshot();
      if (options_.on_wait) options_.on_wait(p.blocked ? p.seconds : 0.0);
      if (!p.blocked) continue;
      if (p.episodes != episode) {
        episode = p.episodes;
        last_ask = {};
      }
      if (threads_ && p.seconds >= ask_after_ && Clock::now() - last_ask > std::chrono::seconds(1)) {
        ask_everyone();
        last_ask = Clock::now();
      }
      if (options_.warning_seconds > 0 && p.seconds >= options_.warning_seconds && warned != episode) {
        warned = episode;
        std::fprintf(stderr, "zerocpp: warning: %s has waited %.0f s in %s of step %lld%s\n", name(rank_).c_str(), p.seconds,
                     p.what.c_str(), static_cast<long long>(p.step), describe_others(p).c_str());
      }
      if (options_.timeout_seconds > 0 && p.seconds >= options_.timeout_seconds) {
        std::fprintf(stderr,
                     "zerocpp: error: %s: collective timeout (%.0f s) in %s of step %lld%s; ending the job "
                     "(nothing more is written)\n",
                     name(rank_).c_str(), options_.timeout_seconds, p.what.c_str(), static_cast<long long>(p.step),
                     describe_others(p).c_str());
        std::fflush(stderr);
        std::fflush(stdout);
        std::_Exit(1);
      }
    }
  }

  void send(int to, int tag, const Status& s) {
    sends_.emplace_back();
    // Status is copied into the pending-message list: MPI reads it until the send completes.
    outgoing_.push_back(s);
    MPI_Isend(&outgoing_.back(), sizeof(Status), MPI_BYTE, to, tag, comm_, &sends_.back());
    // Retire completed sends (their buffers) from the front.
    while (!sends_.empty()) {
      int done = 0;
      MPI_Test(&sends_.front(), &done, MPI_STATUS_IGNORE);
      if (!done) break;
      sends_.erase(sends_.begin());
      outgoing_.erase(outgoing_.begin());
    }
  }

  void ask_everyone() {
    const Status mine = my_status();
    for (int r = 0; r < size_; ++r)
      if (r != rank_) send(r, kQuery, mine);
  }

  void receive() {
    int flag = 0;
    MPI_Status probe;
    while (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, &probe) == MPI_SUCCESS && flag) {
      Status s;
      MPI_Recv(&s, sizeof s, MPI_BYTE, probe.MPI_SOURCE, probe.MPI_TAG, comm_, MPI_STATUS_IGNORE);
      Peer& peer = peers_[static_cast<size_t>(probe.MPI_SOURCE)];
      peer = {true, s, Clock::now()};
      if (probe.MPI_TAG == kQuery) send(probe.MPI_SOURCE, kAnswer, my_status());
    }
  }

  // "rank 2", or "rank 2 on worker-2" when the world spans several hosts.
  std::string name(int r) const {
    return hosts_.empty() ? fmt::format("rank {}", r) : fmt::format("rank {} on {}", r, hosts_[static_cast<size_t>(r)]);
  }

  // ": did not arrive: rank 1 (no answer: stopped or dead), rank 2 (running step 4, in no collective)".
  std::string describe_others(const ProgressSnapshot& p) const {
    if (!threads_) return " (MPI without MPI_THREAD_MULTIPLE: the other ranks cannot be asked)";
    std::string missing;
    int arrived = 0;
    const auto fresh = std::chrono::duration<double>(std::max(3.0, 3 * poll_));
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const Peer& peer = peers_[static_cast<size_t>(r)];
      const Status& s = peer.status;
      std::string why;
      if (!peer.heard || Clock::now() - peer.when > fresh) {
        why = "no answer: stopped, dead or unreachable";
      } else if (!s.blocked) {
        why = fmt::format("running step {}, in no collective", s.step);
      } else if (p.what != s.what || p.step != s.step) {
        why = fmt::format("waiting in {} of step {} instead", s.what, s.step);
      } else {
        ++arrived;
        continue;
      }
      missing += fmt::format("{}{} ({})", missing.empty() ? "" : ", ", name(r), why);
    }
    if (missing.empty()) return fmt::format("; all {} other ranks are waiting in it too", arrived);
    return "; did not arrive: " + missing;
  }

  WatchdogOptions options_;
  int rank_, size_;
  bool threads_;
  std::vector<std::string> hosts_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  double poll_ = 1, ask_after_ = 1;
  std::vector<Peer> peers_;
  std::vector<MPI_Request> sends_;
  std::deque<Status> outgoing_;  // a deque: pushing keeps the addresses MPI still reads
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Watchdog> Watchdog::start(World& world, const WatchdogOptions& options) {
  if (!world.distributed()) return nullptr;
  if (options.timeout_seconds <= 0 && options.warning_seconds <= 0) return nullptr;
  // It watches the process, among all of MPI_COMM_WORLD's: an engine over a data-parallel group
  // (tensor or pipeline parallelism) waits on the other groups' ranks too.
  int processes = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &processes);
  if (processes == 1) return nullptr;
  int provided = 0;
  MPI_Query_thread(&provided);
  std::vector<std::string> hosts;  // (names only what this world knows: every process's host, or none)
  for (int r = 0; world.num_nodes() > 1 && world.size() == processes && r < world.size(); ++r) hosts.push_back(world.host(r));
  return std::make_unique<MpiWatchdog>(options, world.process_rank(), processes, provided == MPI_THREAD_MULTIPLE,
                                       std::move(hosts));
}

WatchdogOptions watchdog_options(double config_timeout, double config_warning) {
  WatchdogOptions o;
  o.timeout_seconds = config_timeout;
  o.warning_seconds = config_warning;
  if (const char* env = std::getenv("ZERO_COLLECTIVE_TIMEOUT"); env && *env) {
    char* end = nullptr;
    o.timeout_seconds = std::strtod(env, &end);
    if (*end != '\0' || o.timeout_seconds < 0)
      throw Error(std::string("ZERO_COLLECTIVE_TIMEOUT=") + env + ": expected seconds (a number >= 0)", "ZERO_COLLECTIVE_TIMEOUT");
    // A shorter timeout than the warning: warn at half of it.
    if (o.warning_seconds <= 0 || o.warning_seconds > o.timeout_seconds) o.warning_seconds = o.timeout_seconds / 2;
  }
  return o;
}

}  // namespace zero::comm_detail
