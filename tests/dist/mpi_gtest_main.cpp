// GoogleTest main for tests that run under mpirun: one World for the whole process; rank 0
// prints the usual report, other ranks print only their failures (prefixed with the rank).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dist_test_world.h"
#include "zero/allocator.h"

namespace {

zero::World* g_world = nullptr;

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, result.file_name() ? result.file_name() : "?",
                   result.line_number(), result.summary());
    }
  }

 private:
  int rank_;
};

}  // namespace

zero::World& test_world() { return *g_world; }

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // The allocator settings zero-train and zero-finetune run under (include/zero/allocator.h):
  // without them every engine's large buffers were faulted in afresh each step, which was 40-50 %
  // of a test's time in page clearing (dist_finetune_np1 17.7 s -> 8.8 s, docs/testing.md).
  zero::keep_freed_memory();
  torch::set_num_threads(1);
  zero::World world = zero::World::from_environment();
  g_world = &world;
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(world.rank()));
  }
  int result = RUN_ALL_TESTS();
  g_world = nullptr;
  return result;
}
