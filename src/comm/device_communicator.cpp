#include "comm/device_communicator.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "comm/mpi_work.h"
#include "zero/error.h"
#ifdef ZERO_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>

#include "zero/nccl.h"
#endif

namespace zero {
namespace {

using comm_detail::CompletedWork;

// Every staged collective completes before it returns: the copies back need its result.
CollectiveOptions blocking(CollectiveOptions options) {
  options.async = false;
  return options;
}

at::Tensor to_host(const at::Tensor& t) { return t.to(at::kCPU).contiguous(); }
at::Tensor host_like(const at::Tensor& t) { return at::empty(t.sizes(), t.options().device(at::kCPU)); }

}  // namespace

std::shared_ptr<Work> HostStagedCommunicator::all_reduce(const at::Tensor& tensor, ReduceOp op,
                                                         const CollectiveOptions& options) {
  if (tensor.is_cpu()) return host_.all_reduce(tensor, op, options);
  at::Tensor staged = to_host(tensor);
  host_.all_reduce(staged, op, blocking(options))->wait();
  tensor.copy_(staged);
  return std::make_shared<CompletedWork>();
}

std::shared_ptr<Work> HostStagedCommunicator::reduce_scatter(const at::Tensor& input, const at::Tensor& output,
                                                             ReduceOp op, const CollectiveOptions& options) {
  if (input.is_cpu() && output.is_cpu()) return host_.reduce_scatter(input, output, op, options);
  return staged(input, output, [&](const at::Tensor& in, const at::Tensor& out) {
    return host_.reduce_scatter(in, out, op, blocking(options));
  });
}

std::shared_ptr<Work> HostStagedCommunicator::all_gather(const at::Tensor& input, const at::Tensor& output,
                                                         const CollectiveOptions& options) {
  if (input.is_cpu() && output.is_cpu()) return host_.all_gather(input, output, options);
  return staged(input, output,
                [&](const at::Tensor& in, const at::Tensor& out) { return host_.all_gather(in, out, blocking(options)); });
}

std::shared_ptr<Work> HostStagedCommunicator::broadcast(const at::Tensor& tensor, int root,
                                                        const CollectiveOptions& options) {
  if (tensor.is_cpu()) return host_.broadcast(tensor, root, options);
  at::Tensor staged = to_host(tensor);
  host_.broadcast(staged, root, blocking(options))->wait();
  tensor.copy_(staged);
  return std::make_shared<CompletedWork>();
}

std::shared_ptr<Work> HostStagedCommunicator::all_to_all(const at::Tensor& input, const at::Tensor& output,
                                                         const CollectiveOptions& options) {
  if (input.is_cpu() && output.is_cpu()) return host_.all_to_all(input, output, options);
  return staged(input, output,
                [&](const at::Tensor& in, const at::Tensor& out) { return host_.all_to_all(in, out, blocking(options)); });
}

std::shared_ptr<Work> HostStagedCommunicator::staged(
    const at::Tensor& input, const at::Tensor& output,
    const std::function<std::shared_ptr<Work>(const at::Tensor&, const at::Tensor&)>& collective) {
  const at::Tensor staged_in = to_host(input), staged_out = host_like(output);
  collective(staged_in, staged_out)->wait();
  output.copy_(staged_out);
  return std::make_shared<CompletedWork>();
}

std::unique_ptr<Communicator> HostStagedCommunicator::split(int color, int key) {
  auto child = host_.split(color, key);
  if (!child) return nullptr;
  return std::make_unique<HostStagedCommunicator>(std::move(child));
}

std::unique_ptr<Communicator> make_device_communicator(World& world, at::Device device) {
  if (device.is_cpu()) return nullptr;
  const char* asked = std::getenv("ZERO_DEVICE_BACKEND");
  const std::string backend = asked && *asked ? asked : "";
  if (!backend.empty() && backend != "nccl" && backend != "mpi") {
    throw Error("ZERO_DEVICE_BACKEND is \"" + backend + "\": use nccl or mpi", "ZERO_DEVICE_BACKEND", world.rank());
  }
  // A world of one without a launcher copies locally whatever the device (LocalCommunicator):
  // nothing to stage, no NCCL to start.
  if (!world.distributed()) return nullptr;
#ifdef ZERO_WITH_CUDA
  if (device.is_cuda()) {
    // NCCL refuses two ranks on one GPU: ranks that share one go through MPI.
    const bool own_gpu = world.local_size() <= static_cast<int>(c10::cuda::device_count());
    if (backend == "nccl" || (backend.empty() && own_gpu)) {
      return make_nccl_communicator(world, device.has_index() ? device.index() : c10::cuda::current_device());
    }
  }
#endif
  if (backend == "nccl") {
    throw Error("ZERO_DEVICE_BACKEND=nccl: this build has no NCCL backend (configure with -DZERO_WITH_CUDA=ON)",
                "ZERO_DEVICE_BACKEND", world.rank());
  }
  return std::make_unique<HostStagedCommunicator>(world.communicator());
}

}  // namespace zero
