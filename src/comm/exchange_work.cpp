#include "comm/exchange_work.h"

#include <fmt/core.h>

#include <algorithm>
#include <climits>
#include <thread>

#include "comm/mpi_work.h"
#include "comm/progress.h"
#include "zero/error.h"

namespace zero::comm_detail {

void ExchangeProgress::add(const std::shared_ptr<ExchangeWork>& work) {
  std::lock_guard<std::mutex> lock(mutex_);
  works_.erase(std::remove_if(works_.begin(), works_.end(), [](const auto& w) { return w.expired(); }), works_.end());
  works_.push_back(work);
}

void ExchangeProgress::poll() {
  std::vector<std::shared_ptr<ExchangeWork>> alive;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (polling_) return;
    polling_ = true;
    for (const auto& w : works_) {
      if (auto work = w.lock()) alive.push_back(std::move(work));
    }
  }
  for (const auto& work : alive) {
    try {
      work->test();
    } catch (const Error&) {  // its waiter sees it
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  polling_ = false;
}

ExchangeWork::ExchangeWork(const char* what, MPI_Comm comm, int rank, int tag_base, std::vector<ExchangeStage> stages,
                           std::shared_ptr<ExchangeProgress> progress)
    : what_(what), comm_(comm), rank_(rank), tag_base_(tag_base), stages_(std::move(stages)),
      progress_(std::move(progress)) {
  if (stages_.size() > static_cast<size_t>(kMaxStages)) throw Error("too many exchange stages", what_, rank_);
  start_stage();
}

ExchangeWork::~ExchangeWork() {
  try {
    wait();
  } catch (...) {  // the error was the waiter's to see; the buffers are free to go now
  }
}

void ExchangeWork::fail(int code) { fail(mpi_error_string(code)); }

void ExchangeWork::fail(const std::string& why) {
  error_ = fmt::format("{} failed in stage {}: {}", what_, stage_ + 1, why);
  // Note: the requests of a failed stage may never complete; they are abandoned with the stage.
  requests_.clear();
  stage_ = stages_.size();
}

void ExchangeWork::start_stage() {
  while (stage_ < stages_.size()) {
    sends_.clear();
    receives_.clear();
    stages_[stage_].make(sends_, receives_);
    const int tag = tag_base_ + static_cast<int>(stage_);
    for (const auto* list : {&receives_, &sends_}) {
      for (const auto& m : *list) {
        if (m.data.nbytes() > static_cast<size_t>(INT_MAX)) {  // before anything of the stage is posted
          return fail(fmt::format("a message of {} bytes exceeds MPI's limit of {}; use smaller buckets",
                                  m.data.nbytes(), INT_MAX));
        }
      }
    }
    requests_.assign(receives_.size() + sends_.size(), MPI_REQUEST_NULL);
    size_t i = 0;
    // Receives first, so no message of this stage waits in an unexpected-message queue.
    for (auto& m : receives_) {
      const int code = MPI_Irecv(m.data.data_ptr(), static_cast<int>(m.data.nbytes()), MPI_BYTE, m.peer, tag, comm_,
                                 &requests_[i++]);
      if (code != MPI_SUCCESS) return fail(code);
    }
    for (auto& m : sends_) {
      const int code = MPI_Isend(m.data.data_ptr(), static_cast<int>(m.data.nbytes()), MPI_BYTE, m.peer, tag, comm_,
                                 &requests_[i++]);
      if (code != MPI_SUCCESS) return fail(code);
    }
    if (!requests_.empty()) return;
    complete_stage();  // nothing to exchange (a node of one rank): on to the next stage now
  }
}

void ExchangeWork::complete_stage() {
  requests_.clear();
  sends_.clear();
  receives_.clear();
  if (stages_[stage_].finish) stages_[stage_].finish();
  ++stage_;
}

bool ExchangeWork::test() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  while (stage_ < stages_.size()) {
    int done = 0;
    const int code = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
    if (code != MPI_SUCCESS) fail(code);
    if (!error_.empty()) throw Error(error_, what_, rank_);
    if (!done) return false;
    complete_stage();
    start_stage();
  }
  if (!error_.empty()) throw Error(error_, what_, rank_);
  return true;
}

void ExchangeWork::wait() {
  BlockedScope blocked(what_);  // the watchdog sees this rank waiting here
  // Note: not MPI_Waitall on this stage alone: another exchange of this rank may be the one
  // the other ranks wait for, and its next stage starts only when this rank polls it.
  while (!test()) {
    if (progress_) progress_->poll();
    std::this_thread::yield();
  }
}

}  // namespace zero::comm_detail
