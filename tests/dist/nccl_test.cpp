// The NCCL backend on CUDA tensors (built with ZERO_WITH_CUDA; one GPU per rank).
#include "zero/nccl.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist_test_world.h"
#include "zero/error.h"

using zero::ReduceOp;

namespace {

at::Tensor contribution(int r, int64_t n, at::ScalarType dtype) {
  auto v = (torch::arange(n, torch::kLong) * 3 + r * 7) % 11 - 5;
  return v.to(dtype);
}

at::Tensor summed(int size, int64_t n, at::ScalarType dtype) {
  at::Tensor acc = torch::zeros({n}, torch::kDouble);
  for (int r = 0; r < size; ++r) acc += contribution(r, n, dtype).to(torch::kDouble);
  return acc.to(dtype);
}

std::unique_ptr<zero::Communicator>& gpu() {
  static std::unique_ptr<zero::Communicator> comm =
      zero::make_nccl_communicator(test_world(), test_world().local_rank() % torch::cuda::device_count());
  return comm;
}

at::Device device() { return at::Device(at::kCUDA, test_world().local_rank() % torch::cuda::device_count()); }

}  // namespace

TEST(Nccl, CollectivesMatchTheReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  zero::Communicator& c = *gpu();
  const int rank = c.rank(), size = c.size();
  EXPECT_EQ(c.backend(), "nccl");
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kInt, at::kLong}) {
    for (const zero::CollectiveOptions mode :
         {zero::CollectiveOptions{.async = true}, zero::CollectiveOptions{.async = false}}) {
      at::Tensor t = contribution(rank, 1031, dtype).to(device());
      c.all_reduce(t, ReduceOp::kSum, mode)->wait();
      EXPECT_TRUE(t.cpu().equal(summed(size, 1031, dtype))) << c10::toString(dtype);

      at::Tensor input = contribution(rank, 7 * size, dtype).to(device());
      at::Tensor output = torch::empty({7}, input.options());
      c.reduce_scatter(input, output, ReduceOp::kSum, mode)->wait();
      EXPECT_TRUE(output.cpu().equal(summed(size, 7 * size, dtype).narrow(0, rank * 7, 7)));
      at::Tensor slice = input.narrow(0, rank * 7, 7);  // in place: the bucket's own slice
      c.reduce_scatter(input, slice, ReduceOp::kSum, mode)->wait();
      EXPECT_TRUE(slice.cpu().equal(summed(size, 7 * size, dtype).narrow(0, rank * 7, 7)));

      at::Tensor gathered = torch::empty({5 * size}, input.options());
      c.all_gather(contribution(rank, 5, dtype).to(device()), gathered, mode)->wait();
      for (int r = 0; r < size; ++r) EXPECT_TRUE(gathered.cpu().narrow(0, r * 5, 5).equal(contribution(r, 5, dtype)));

      at::Tensor b = contribution(rank, 9, dtype).to(device());
      c.broadcast(b, size - 1, mode)->wait();
      EXPECT_TRUE(b.cpu().equal(contribution(size - 1, 9, dtype)));

      at::Tensor a2a_out = torch::empty({3 * size}, input.options());
      c.all_to_all(contribution(rank, 3 * size, dtype).to(device()), a2a_out, mode)->wait();
      torch::cuda::synchronize();
    }
  }
  c.barrier()->wait();
}

// An engine's small control values (norms, flags) are host tensors: they take the MPI world NCCL
// was bootstrapped from, and come back summed like the device's.
TEST(Nccl, HostTensorsGoThroughMpi) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  at::Tensor host = torch::ones({4});
  gpu()->all_reduce(host, ReduceOp::kSum)->wait();
  EXPECT_TRUE(host.equal(torch::full({4}, static_cast<double>(gpu()->size()))));
}

// A tensor on another GPU than the communicator's is a clear error.
TEST(Nccl, AnotherDeviceIsAClearError) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "one CUDA device";
  at::Tensor elsewhere = torch::ones({4}, torch::TensorOptions().device(torch::kCUDA, 1));
  try {
    gpu()->all_reduce(elsewhere, ReduceOp::kSum)->wait();
    FAIL();
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("this communicator uses cuda:"), std::string::npos) << e.what();
  }
}
