// The gradients of the owned shards streamed into the optimizer's swap file (stages 2/3 with the
// optimizer on NVMe): pieces that cross chunk and tile boundaries, in fp32 and bf16, replaced
// then accumulated over micro-steps, must land in each tile's gradient segment exactly as an
// in-memory fp32 accumulator would hold them, with the sum of squares of the same grouping, and
// without touching the master beside them.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include "engine/gradient_swap.h"
#include "engine/optimizer_swap.h"
#include "optim/cpu_kernels.h"
#include "zero/error.h"

using zero::engine::GradientSwap;
using zero::engine::OptimizerSwap;
using zero::engine::SwapOptions;

namespace {

struct TempDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("zero_gradient_swap." + std::to_string(getpid()));
  TempDir() { std::filesystem::create_directories(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
};

SwapOptions small_io(const std::string& dir) {
  SwapOptions o;
  o.dir = dir;
  o.aio.block_size = 4096;  // one chunk = 1024 floats, smaller than a tile
  o.aio.queue_depth = 2;
  o.buffer_count = 2;
  return o;
}

TEST(GradientSwap, PiecesAccumulateInTheFileAsInMemory) {
  TempDir dir;
  const int64_t total = 5000;
  // Tiles of 1500 elements (1500, 1500, 1500, 500); pieces of every awkward size; chunks of 1024.
  const std::vector<int64_t> pieces = {7, 1, 1023, 2000, 1969};
  for (at::ScalarType wire : {at::kFloat, at::kBFloat16}) {
    OptimizerSwap swap(small_io(dir.path.string()), zero::optim::tiles_of(total, 1500), 2, /*with_gradients=*/true);
    const at::Tensor master = torch::arange(total, torch::kFloat);
    swap.write_initial([&](zero::optim::Tile t, const at::Tensor& out) { out.copy_(master.narrow(0, t.offset, t.length)); });
    GradientSwap stream(swap, 4096);
    EXPECT_EQ(stream.buffer_bytes(), 3 * 4096);
    at::Tensor expected = torch::zeros({total}, torch::kFloat);
    double expected_sum = 0;
    torch::manual_seed(7);
    for (int micro = 0; micro < 3; ++micro) {
      expected_sum = 0;
      int64_t offset = 0;
      for (int64_t n : pieces) {
        const at::Tensor shard = torch::randn({n}).to(wire);
        at::Tensor mine = expected.narrow(0, offset, n);
        micro == 0 ? mine.copy_(shard) : mine.add_(shard);  // what a streamed bucket does in memory (Bucket::finish_grad_sync)
        expected_sum += zero::optim::sum_of_squares(mine.data_ptr<float>(), n);
        stream.put(offset, shard, micro == 0);
        offset += n;
      }
      ASSERT_TRUE(stream.complete());
    }
    EXPECT_EQ(stream.sum_of_squares(), expected_sum);
    int tiles = 0;
    swap.for_each_tile([&](zero::optim::Tile t, const zero::engine::TileViews& v) {
      ++tiles;
      EXPECT_TRUE(v.gradients.equal(expected.narrow(0, t.offset, t.length))) << "tile at " << t.offset;
      EXPECT_TRUE(v.master.equal(master.narrow(0, t.offset, t.length))) << "tile at " << t.offset;
    });
    EXPECT_EQ(tiles, 4);
  }
}

TEST(GradientSwap, APieceOutOfOrderOrAStepMidStreamIsAnError) {
  TempDir dir;
  OptimizerSwap swap(small_io(dir.path.string()), zero::optim::tiles_of(100, 60), 2, true);
  swap.write_initial([](zero::optim::Tile, const at::Tensor& out) { out.zero_(); });
  GradientSwap stream(swap, 4096);
  EXPECT_THROW(stream.put(10, torch::ones({5}), true), zero::Error);
  stream.put(0, torch::ones({40}), true);
  EXPECT_FALSE(stream.complete());
  EXPECT_THROW(stream.sum_of_squares(), zero::Error);
}

// The optimizer's swap, before it creates anything: a pool of buffers larger than the memory
// available (MemAvailable) is an error naming sub_group_size, with the sizes.
TEST(OptimizerSwap, APoolLargerThanMemoryIsAnErrorNamingSubGroupSize) {
  TempDir dir;
  const int64_t huge = int64_t{1} << 38;  // elements in one tile: 1 TiB per segment
  try {
    OptimizerSwap swap(small_io(dir.path.string()), {{0, huge}, {huge, huge}}, 2, true);
    FAIL() << "no error";
  } catch (const zero::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("zero_optimization.sub_group_size"), std::string::npos) << what;
    EXPECT_NE(what.find("memory available"), std::string::npos) << what;
    EXPECT_EQ(e.subject(), "zero_optimization.sub_group_size");
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path)) << "it created something first";
}

}  // namespace
