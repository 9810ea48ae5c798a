#include "comm/thread_communicator.h"

#include <ATen/ATen.h>
#include <fmt/core.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/collective_checks.h"
#include "comm/quantized_collectives.h"
#include "zero/error.h"

namespace zero::comm_detail {
namespace {

// One collective, as the ranks that have called it so far described it.
struct Call {
  struct Arrival {
    CollectiveOp op;
    ReduceOp reduce;
    int root;
    at::Tensor input, output;
  };
  std::vector<std::optional<Arrival>> arrivals;
  int arrived = 0, finished = 0;
  bool done = false;
  std::string error;
};

std::string describe_arrival(const Call::Arrival& a) {
  std::string text = std::string(to_string(a.op)) + " " + (a.input.defined() ? describe(a.input) : "");
  if (a.op == CollectiveOp::kAllReduce || a.op == CollectiveOp::kReduceScatter) text += std::string(" ") + to_string(a.reduce);
  if (a.op == CollectiveOp::kBroadcast) text += " root " + std::to_string(a.root);
  return text;
}

// The reduction of every rank's `input` (flattened), accumulated wide and rounded once.
at::Tensor reduce_all(const std::vector<std::optional<Call::Arrival>>& arrivals, ReduceOp op) {
  const at::ScalarType dtype = arrivals[0]->input.scalar_type();
  const bool floating = at::isFloatingType(dtype);
  at::Tensor acc;
  for (const auto& a : arrivals) {
    at::Tensor wide = a->input.reshape(-1).to(floating ? at::kDouble : at::kLong);
    if (!acc.defined()) {
      acc = wide.clone();
    } else if (op == ReduceOp::kMax) {
      acc = at::maximum(acc, wide);
    } else if (op == ReduceOp::kMin) {
      acc = at::minimum(acc, wide);
    } else {
      acc.add_(wide);
    }
  }
  const auto ranks = static_cast<int64_t>(arrivals.size());
  if (op == ReduceOp::kAvg) acc = floating ? acc / static_cast<double>(ranks) : at::div(acc, ranks, "trunc");
  return acc.to(dtype);
}

// Every rank's result, computed from every input before any output is written (outputs may alias
// inputs: an in-place all-gather gathers into the buffer its shard is part of).
void complete(Call& call) {
  const auto& first = *call.arrivals[0];
  for (size_t r = 1; r < call.arrivals.size(); ++r) {
    const auto& a = *call.arrivals[r];
    const bool same = a.op == first.op && a.reduce == first.reduce && a.root == first.root &&
                      (!a.input.defined() || (a.input.scalar_type() == first.input.scalar_type() &&
                                              a.input.numel() == first.input.numel()));
    if (!same) {
      call.error = fmt::format("ranks disagree on a collective: rank 0 called {}, rank {} called {}",
                               describe_arrival(first), r, describe_arrival(a));
      return;
    }
  }
  const auto n = static_cast<int64_t>(call.arrivals.size());
  std::vector<at::Tensor> results(call.arrivals.size());
  switch (first.op) {
    case CollectiveOp::kAllReduce: {
      at::Tensor sum = reduce_all(call.arrivals, first.reduce);
      for (auto& result : results) result = sum;
      break;
    }
    case CollectiveOp::kReduceScatter: {
      at::Tensor sum = reduce_all(call.arrivals, first.reduce);
      const int64_t chunk = first.input.numel() / n;
      for (int64_t r = 0; r < n; ++r) results[static_cast<size_t>(r)] = sum.narrow(0, r * chunk, chunk);
      break;
    }
    case CollectiveOp::kAllGather: {
      std::vector<at::Tensor> pieces;
      for (const auto& a : call.arrivals) pieces.push_back(a->input.reshape(-1));
      at::Tensor gathered = at::cat(pieces);
      for (auto& result : results) result = gathered;
      break;
    }
    case CollectiveOp::kBroadcast: {
      at::Tensor source = call.arrivals[static_cast<size_t>(first.root)]->input.reshape(-1).clone();
      for (auto& result : results) result = source;
      break;
    }
    case CollectiveOp::kAllToAll: {
      const int64_t chunk = first.input.numel() / n;
      for (int64_t j = 0; j < n; ++j) {
        std::vector<at::Tensor> pieces;
        for (const auto& a : call.arrivals) pieces.push_back(a->input.reshape(-1).narrow(0, j * chunk, chunk));
        results[static_cast<size_t>(j)] = at::cat(pieces);
      }
      break;
    }
    case CollectiveOp::kBarrier:
      break;
  }
  for (size_t r = 0; r < results.size(); ++r) {
    if (results[r].defined()) call.arrivals[r]->output.view(-1).copy_(results[r]);
  }
}

struct Group {
  int size;
  std::chrono::milliseconds timeout;
  std::mutex mutex;
  std::condition_variable changed;
  std::map<int64_t, Call> calls;  // by call number; erased once every rank has finished it
};

class ThreadWork : public Work {
 public:
  ThreadWork(std::shared_ptr<Group> group, int64_t number, int rank)
      : group_(std::move(group)), number_(number), rank_(rank) {}
  ~ThreadWork() override {
    try {
      wait();
    } catch (const std::exception&) {  // the error was the waiter's to see; destruction must not throw
    }
  }
  void wait() override {
    if (finished_) return rethrow();
    std::unique_lock lock(group_->mutex);
    Call& call = group_->calls.at(number_);
    if (!group_->changed.wait_for(lock, group_->timeout, [&] { return call.done; })) {
      std::string missing;
      for (size_t r = 0; r < call.arrivals.size(); ++r)
        if (!call.arrivals[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      call.error = fmt::format("collective #{} ({}) timed out on rank {} after {} ms: rank(s) {} never called it",
                               number_, describe_arrival(*call.arrivals[static_cast<size_t>(rank_)]), rank_,
                               group_->timeout.count(), missing);
      call.done = true;
      group_->changed.notify_all();
    }
    error_ = call.error;
    finished_ = true;
    if (++call.finished == group_->size) group_->calls.erase(number_);
    lock.unlock();
    rethrow();
  }
  bool test() override {
    if (finished_) return rethrow(), true;
    {
      std::lock_guard lock(group_->mutex);
      if (!group_->calls.at(number_).done) return false;
    }
    wait();
    return true;
  }
  std::string error() const override { return error_; }

 private:
  void rethrow() const {
    if (!error_.empty()) throw Error(error_);
  }
  std::shared_ptr<Group> group_;
  int64_t number_;
  int rank_;
  bool finished_ = false;
  std::string error_;
};

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }
  std::string backend() const override { return "threads"; }

  std::shared_ptr<Work> all_reduce(const at::Tensor& tensor, ReduceOp op, const CollectiveOptions& options) override {
    check_tensor(CollectiveOp::kAllReduce, "input", tensor, true, rank_);
    return post({CollectiveOp::kAllReduce, op, 0, tensor, tensor}, options);
  }
  std::shared_ptr<Work> reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                                       const CollectiveOptions& options) override {
    if (options.quantize_bits) return comm_detail::quantized_reduce_scatter(*this, input, output, op, options);
    check_pair(CollectiveOp::kReduceScatter, input, output, size(), 1, true, rank_);
    return post({CollectiveOp::kReduceScatter, op, 0, input, output}, options);
  }
  std::shared_ptr<Work> all_gather(const at::Tensor& input, const at::Tensor& output,
                                   const CollectiveOptions& options) override {
    if (options.quantize_bits) return comm_detail::quantized_all_gather(*this, input, output, options);
    check_pair(CollectiveOp::kAllGather, input, output, 1, size(), true, rank_);
    return post({CollectiveOp::kAllGather, ReduceOp::kSum, 0, input, output}, options);
  }
  std::shared_ptr<Work> broadcast(const at::Tensor& tensor, int root, const CollectiveOptions& options) override {
    check_tensor(CollectiveOp::kBroadcast, "input", tensor, true, rank_);
    check_root(root, size(), rank_);
    return post({CollectiveOp::kBroadcast, ReduceOp::kSum, root, tensor, tensor}, options);
  }
  std::shared_ptr<Work> all_to_all(const at::Tensor& input, const at::Tensor& output,
                                   const CollectiveOptions& options) override {
    check_pair(CollectiveOp::kAllToAll, input, output, 1, 1, true, rank_);
    return post({CollectiveOp::kAllToAll, ReduceOp::kSum, 0, input, output}, options);
  }
  std::shared_ptr<Work> barrier(const CollectiveOptions& options) override {
    return post({CollectiveOp::kBarrier, ReduceOp::kSum, 0, {}, {}}, options);
  }
  std::unique_ptr<Communicator> split(int, int) override {
    throw Error("the in-process thread group does not split into sub-groups");
  }

 private:
  std::shared_ptr<Work> post(Call::Arrival arrival, const CollectiveOptions& options) {
    const int64_t number = next_++;
    {
      std::lock_guard lock(group_->mutex);
      Call& call = group_->calls[number];
      if (call.arrivals.empty()) call.arrivals.resize(static_cast<size_t>(group_->size));
      call.arrivals[static_cast<size_t>(rank_)] = std::move(arrival);
      if (++call.arrived == group_->size && !call.done) {
        try {
          complete(call);
        } catch (const std::exception& e) {
          call.error = e.what();
        }
        call.done = true;
        for (auto& a : call.arrivals) a->input = a->output = at::Tensor();  // hold no buffers after
        group_->changed.notify_all();
      }
    }
    auto work = std::make_shared<ThreadWork>(group_, number, rank_);
    if (!options.async) work->wait();
    return work;
  }
  std::shared_ptr<Group> group_;
  int rank_;
  int64_t next_ = 0;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_group(int size, std::chrono::milliseconds timeout) {
  if (size < 1) throw Error("a thread group needs at least one rank, got " + std::to_string(size));
  auto group = std::make_shared<Group>();
  group->size = size;
  group->timeout = timeout;
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_unique<ThreadCommunicator>(group, r));
  return ranks;
}

void run_on_threads(int size, const std::function<void(int rank)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace zero::comm_detail
