// The NCCL backend. Compiled only with ZERO_WITH_CUDA.
#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <fmt/core.h>
#include <nccl.h>

#include "comm/collective_checks.h"
#include "comm/quantized_collectives.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_work.h"
#include "zero/error.h"
#include "zero/nccl.h"

namespace zero {
namespace comm_detail {
namespace {

ncclDataType_t nccl_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    case at::kInt: return ncclInt32;
    default: return ncclInt64;  // kLong; anything else was rejected by check_tensor
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

void check_nccl(ncclResult_t result, const char* what, int rank) {
  if (result != ncclSuccess) throw Error(fmt::format("{} failed: {}", what, ncclGetErrorString(result)), what, rank);
}

void check_cuda(cudaError_t result, const char* what, int rank) {
  if (result != cudaSuccess) throw Error(fmt::format("{} failed: {}", what, cudaGetErrorString(result)), what, rank);
}

// One collective on the communication stream, finished when `done` has fired.
class NcclWork : public Work {
 public:
  NcclWork(ncclComm_t comm, cudaEvent_t done, std::vector<at::Tensor> tensors, int device, std::string what, int rank)
      : comm_(comm), done_(done), tensors_(std::move(tensors)), device_(device), what_(std::move(what)), rank_(rank) {}
  ~NcclWork() override { cudaEventDestroy(done_); }

  void wait() override {
    c10::cuda::CUDAGuard guard(device_);
    check_cuda(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(), done_, 0), what_.c_str(), rank_);
    check_async();
  }
  bool test() override {
    check_async();
    cudaError_t state = cudaEventQuery(done_);
    if (state == cudaErrorNotReady) return false;
    check_cuda(state, what_.c_str(), rank_);
    return true;
  }
  std::string error() const override { return error_; }

 private:
  void check_async() {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      error_ = what_ + " failed: " + ncclGetErrorString(async);
      throw Error(error_, what_, rank_);
    }
  }

  ncclComm_t comm_;
  cudaEvent_t done_;
  std::vector<at::Tensor> tensors_;
  int device_;
  std::string what_;
  int rank_;
  std::string error_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<MpiCommunicator> bootstrap, int device)
      : bootstrap_(std::move(bootstrap)), device_(device), stream_(c10::cuda::getStreamFromPool(true, device)) {
    ncclUniqueId id;
    if (bootstrap_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", 0);
    if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, bootstrap_->handle()) != MPI_SUCCESS) {
      throw Error("broadcasting the NCCL id over MPI failed", "nccl", bootstrap_->rank());
    }
    c10::cuda::CUDAGuard guard(device_);
    check_nccl(ncclCommInitRank(&comm_, bootstrap_->size(), id, bootstrap_->rank()), "ncclCommInitRank", rank());
  }
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  std::string backend() const override { return "nccl"; }

  // Host tensors (an engine's small control values: norms, overflow flags, counters) take the
  // MPI world NCCL was bootstrapped from; device tensors take NCCL.
  std::shared_ptr<Work> all_reduce(const at::Tensor& tensor, ReduceOp op, const CollectiveOptions& options) override {
    if (tensor.is_cpu()) return bootstrap_->all_reduce(tensor, op, options);
    bootstrap_->validate(
        CollectiveOp::kAllReduce, [&] { check_device(CollectiveOp::kAllReduce, "input", tensor); }, &tensor,
        tensor.numel(), static_cast<int64_t>(op));
    return run("all_reduce", options, {tensor}, [&](cudaStream_t s) {
      return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.scalar_type()),
                           nccl_op(op), comm_, s);
    });
  }

  std::shared_ptr<Work> reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                                       const CollectiveOptions& options) override {
    if (input.is_cpu() && output.is_cpu()) return bootstrap_->reduce_scatter(input, output, op, options);
    if (options.quantize_bits) return comm_detail::quantized_reduce_scatter(*this, input, output, op, options);
    bootstrap_->validate(
        CollectiveOp::kReduceScatter,
        [&] {
          check_pair(CollectiveOp::kReduceScatter, input, output, size(), 1, false, rank());
          check_device(CollectiveOp::kReduceScatter, "input", input);
          check_device(CollectiveOp::kReduceScatter, "output", output);
        },
        &input, input.numel(), static_cast<int64_t>(op));
    // NCCL allows the output to be this rank's chunk of the input (in place), nothing else that overlaps.
    const bool in_place = output.data_ptr() == static_cast<char*>(input.data_ptr()) + rank() * output.nbytes();
    at::Tensor receive = in_place || !input.storage().is_alias_of(output.storage()) ? output : at::empty_like(output);
    return run(
        "reduce_scatter", options, {input, output, receive},
        [&](cudaStream_t s) {
          return ncclReduceScatter(input.data_ptr(), receive.data_ptr(), receive.numel(), nccl_type(input.scalar_type()),
                                   nccl_op(op), comm_, s);
        },
        [&] {
          if (!receive.is_same(output)) output.copy_(receive, /*non_blocking=*/true);
        });
  }

  std::shared_ptr<Work> all_gather(const at::Tensor& input, const at::Tensor& output,
                                   const CollectiveOptions& options) override {
    if (input.is_cpu() && output.is_cpu()) return bootstrap_->all_gather(input, output, options);
    if (options.quantize_bits) return comm_detail::quantized_all_gather(*this, input, output, options);
    bootstrap_->validate(
        CollectiveOp::kAllGather,
        [&] {
          check_pair(CollectiveOp::kAllGather, input, output, 1, size(), false, rank());
          check_device(CollectiveOp::kAllGather, "input", input);
          check_device(CollectiveOp::kAllGather, "output", output);
        },
        &input, input.numel(), 0);
    return run("all_gather", options, {input, output}, [&](cudaStream_t s) {
      return ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), nccl_type(input.scalar_type()), comm_, s);
    });
  }

  std::shared_ptr<Work> broadcast(const at::Tensor& tensor, int root, const CollectiveOptions& options) override {
    if (tensor.is_cpu()) return bootstrap_->broadcast(tensor, root, options);
    bootstrap_->validate(
        CollectiveOp::kBroadcast,
        [&] {
          check_device(CollectiveOp::kBroadcast, "input", tensor);
          check_root(root, size(), rank());
        },
        &tensor, tensor.numel(), root);
    return run("broadcast", options, {tensor}, [&](cudaStream_t s) {
      return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.scalar_type()), root,
                           comm_, s);
    });
  }

  std::shared_ptr<Work> all_to_all(const at::Tensor& input, const at::Tensor& output,
                                   const CollectiveOptions& options) override {
    if (input.is_cpu() && output.is_cpu()) return bootstrap_->all_to_all(input, output, options);
    bootstrap_->validate(
        CollectiveOp::kAllToAll,
        [&] {
          check_pair(CollectiveOp::kAllToAll, input, output, 1, 1, false, rank());
          check_device(CollectiveOp::kAllToAll, "input", input);
          if (input.numel() % size() != 0) {
            throw Error(fmt::format("all_to_all: input {} does not split into {} equal chunks", describe(input), size()),
                        "all_to_all", rank());
          }
        },
        &input, input.numel(), 0);
    const int64_t chunk = input.numel() / size();
    const size_t chunk_bytes = static_cast<size_t>(chunk) * input.element_size();
    return run("all_to_all", options, {input, output}, [&](cudaStream_t s) {
      ncclResult_t result = ncclGroupStart();
      for (int peer = 0; peer < size() && result == ncclSuccess; ++peer) {
        result = ncclSend(static_cast<char*>(input.data_ptr()) + peer * chunk_bytes, chunk, nccl_type(input.scalar_type()),
                          peer, comm_, s);
        if (result == ncclSuccess) {
          result = ncclRecv(static_cast<char*>(output.data_ptr()) + peer * chunk_bytes, chunk,
                            nccl_type(input.scalar_type()), peer, comm_, s);
        }
      }
      ncclResult_t end = ncclGroupEnd();
      return result != ncclSuccess ? result : end;
    });
  }

  // A host-level barrier: every rank's earlier collectives are launched, not necessarily finished.
  std::shared_ptr<Work> barrier(const CollectiveOptions& options) override { return bootstrap_->barrier(options); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    auto child = bootstrap_->split(color, key);
    if (!child) return nullptr;
    return std::make_unique<NcclCommunicator>(
        std::unique_ptr<MpiCommunicator>(static_cast<MpiCommunicator*>(child.release())), device_);
  }

 private:
  void check_device(CollectiveOp op, const char* role, const at::Tensor& t) const {
    check_tensor(op, role, t, false, rank());
    if (!t.is_cuda() || t.get_device() != device_) {
      throw Error(fmt::format("{}: the {} tensor is on {}, this communicator uses cuda:{}", to_string(op), role,
                              t.device().str(), device_),
                  to_string(op), rank());
    }
  }

  // Orders the collective after the caller's pending work, runs it (and `after`, e.g. a copy out
  // of a staging buffer) on the communication stream, and tells the caching allocator the tensors
  // are in use there until it finishes.
  template <typename Launch>
  std::shared_ptr<Work> run(const char* what, const CollectiveOptions& options, std::vector<at::Tensor> tensors,
                            Launch&& launch, const std::function<void()>& after = {}) {
    c10::cuda::CUDAGuard guard(device_);
    cudaStream_t caller = c10::cuda::getCurrentCUDAStream(device_).stream();
    cudaEvent_t ready, done;
    check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), what, rank());
    check_cuda(cudaEventRecord(ready, caller), what, rank());
    check_cuda(cudaStreamWaitEvent(stream_.stream(), ready, 0), what, rank());
    cudaEventDestroy(ready);
    check_nccl(launch(stream_.stream()), what, rank());
    if (after) {
      c10::cuda::CUDAStreamGuard on_comm_stream(stream_);
      after();
    }
    for (const auto& t : tensors) {
      if (t.defined() && t.numel() > 0) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    }
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), what, rank());
    check_cuda(cudaEventRecord(done, stream_.stream()), what, rank());
    auto work = std::make_shared<NcclWork>(comm_, done, std::move(tensors), device_, what, rank());
    if (!options.async) work->wait();
    return work;
  }

  std::unique_ptr<MpiCommunicator> bootstrap_;
  int device_;
  c10::cuda::CUDAStream stream_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace
}  // namespace comm_detail

std::unique_ptr<Communicator> make_nccl_communicator(World& world, int device) {
  auto bootstrap = world.communicator().split(0, world.rank());
  auto* mpi = dynamic_cast<comm_detail::MpiCommunicator*>(bootstrap.get());
  if (!mpi) throw Error("the NCCL backend needs a World started by an MPI launcher (zero-run)", "nccl", world.rank());
  bootstrap.release();
  return std::make_unique<comm_detail::NcclCommunicator>(std::unique_ptr<comm_detail::MpiCommunicator>(mpi), device);
}

}  // namespace zero
