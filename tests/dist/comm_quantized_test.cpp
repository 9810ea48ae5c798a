// ZeRO++'s quantized collectives (CollectiveOptions::quantize_bits) under mpirun -np 1..4 and
// across "nodes" (ZERO_RANKS_PER_NODE), against the decoded messages summed in the algorithm's order.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>

#include "comm/quantize.h"
#include "dist_test_world.h"
#include "zero/error.h"

using zero::ReduceOp;

// Names unique to this file: the sanitizer's unity build compiles it beside comm_test.cpp.
namespace {

const std::vector<zero::CollectiveOptions> kQuantizedModes = {{.async = true}, {.async = false}};
zero::Communicator& quantized_comm() { return test_world().communicator(); }

at::Tensor decoded(const at::Tensor& values, int bits) {
  using namespace zero::comm_detail;
  return dequantize_blocks(quantize_blocks(values, bits), values.numel(), bits);
}

// What rank r puts into a quantized collective: values of every magnitude, so blocks differ.
at::Tensor quantized_input(int r, int64_t n, at::ScalarType dtype) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(1000 + r);
  return (torch::randn({n}, g) * torch::linspace(0.001, 100, n)).to(dtype);
}

}  // namespace

// ZeRO++'s quantized collectives (CollectiveOptions::quantize_bits) give exactly the sums of the
// decoded messages, in the order the algorithm adds them: on one node (and unequal nodes) every
// chunk goes straight to its owner and the owner adds the ranks in order, its own term exact; on
// equal nodes each rank first adds its node's terms for its column (its own exact), and the
// partial sums then cross nodes quantized once more.
TEST(Collectives, QuantizedMatchTheDecodedValues) {
  zero::World& world = test_world();
  zero::Communicator& c = quantized_comm();
  const int n = c.size(), me = c.rank();
  std::vector<std::vector<int>> nodes(static_cast<size_t>(world.num_nodes()));
  for (int r = 0; r < n; ++r) nodes[static_cast<size_t>(world.node_of(r))].push_back(r);
  const bool two_hops = nodes.size() > 1 && std::all_of(nodes.begin(), nodes.end(), [&](const auto& k) {
                          return k.size() == nodes[0].size();
                        });
  const int64_t chunk = 1031;
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    for (auto mode : kQuantizedModes) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + (mode.async ? " async" : " blocking"));
      // All-gather: every chunk decoded, this rank's too, so all ranks hold the same tensor.
      at::Tensor mine = quantized_input(me, chunk, dtype), gathered = torch::empty({chunk * n}, dtype);
      c.all_gather(mine, gathered, {.async = mode.async, .quantize_bits = 8})->wait();
      for (int r = 0; r < n; ++r) {
        EXPECT_TRUE(gathered.narrow(0, r * chunk, chunk).equal(decoded(quantized_input(r, chunk, dtype), 8).to(dtype)))
            << "chunk " << r;
      }
      // Reduce-scatter.
      auto term = [&](int r) { return quantized_input(r, chunk * n, dtype).narrow(0, me * chunk, chunk).to(at::kFloat); };
      at::Tensor expected = torch::zeros({chunk});
      if (two_hops) {
        const size_t local = static_cast<size_t>(
            std::find(nodes[static_cast<size_t>(world.node_of(me))].begin(), nodes[static_cast<size_t>(world.node_of(me))].end(), me) -
            nodes[static_cast<size_t>(world.node_of(me))].begin());
        for (const auto& node : nodes) {
          const int owner = node[local];  // sums its node's terms for this rank's column
          at::Tensor partial = term(node[0]);
          if (node[0] != owner) partial = decoded(partial, 4);
          for (size_t i = 1; i < node.size(); ++i) partial = partial + (node[i] == owner ? term(owner) : decoded(term(node[i]), 4));
          expected = expected + (owner == me ? partial : decoded(partial, 4));
        }
      } else {
        for (int r = 0; r < n; ++r) expected = expected + (r == me ? term(r) : decoded(term(r), 4));
      }
      at::Tensor input = quantized_input(me, chunk * n, dtype), output = torch::empty({chunk}, dtype);
      c.reduce_scatter(input, output, ReduceOp::kSum, {.async = mode.async, .quantize_bits = 4})->wait();
      EXPECT_TRUE(output.equal(expected.to(dtype))) << "largest difference "
                                                     << (output.to(at::kFloat) - expected).abs().max().item<double>();
      at::Tensor mean = torch::empty({chunk}, dtype);
      c.reduce_scatter(input, mean, ReduceOp::kAvg, {.async = mode.async, .quantize_bits = 4})->wait();
      EXPECT_TRUE(mean.equal((expected / n).to(dtype)));
    }
  }
  // Only sums and means quantize; bits are 4 or 8.
  at::Tensor input = torch::ones({4 * n}), output = torch::empty({4});
  EXPECT_THROW(c.reduce_scatter(input, output, ReduceOp::kMax, {.quantize_bits = 4}), zero::Error);
  EXPECT_THROW(c.reduce_scatter(input, output, ReduceOp::kSum, {.quantize_bits = 2}), zero::Error);
}
