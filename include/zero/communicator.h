// zero::Communicator — collectives over a group of ranks, asynchronous by default.
//
//   auto work = comm.all_reduce(grad, zero::ReduceOp::kAvg);  // returns at once
//   ...                                                        // overlap other work
//   work->wait();                                              // throws zero::Error on failure
//
// Tensors must be contiguous and, for the MPI backend, on the CPU. Supported dtypes: float32,
// float64, float16, bfloat16, int8, uint8, int32, int64. Reductions of float16 and bfloat16 are
// accumulated in float32 and rounded once at the end (MPI has no 16-bit float types, and summing
// in 16 bits would round at every hop).
//
// Every rank of the group must call the same collectives in the same order with matching sizes.
// With CommunicatorOptions::check_consistency (the default) each collective first compares its
// op, dtype, sizes and root across ranks and throws the same zero::Error on every rank when they
// disagree, instead of hanging or corrupting memory. Sizes that are wrong locally (an all-gather
// output that is not size() × the input) are reported without any communication.
//
// This header is torch-free: it forward-declares at::Tensor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace zero {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
enum class CollectiveOp { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kAllToAll, kBarrier };
const char* to_string(ReduceOp op);
const char* to_string(CollectiveOp op);

// Handle of one collective in flight. Destroying an unfinished Work waits for it, because the
// collective still reads and writes the tensors it was given.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective is complete; throws zero::Error if it failed.
  virtual void wait() = 0;
  // Non-blocking: true once complete (and drives progress, which MPI needs); throws on failure.
  virtual bool test() = 0;
  // Empty while running or after success; the failure message otherwise.
  virtual std::string error() const = 0;
};

// Per-call options.
struct CollectiveOptions {
  // true: return at once and overlap (MPI's non-blocking collectives). false: complete before
  // returning, through MPI's blocking collectives, whose tuned algorithms are up to ~2x faster
  // on shared memory (docs/PERFORMANCE.md); use it when the caller would wait straight away.
  bool async = true;
  // ZeRO++ (all_gather and reduce_scatter only): 8 or 4 sends the values as blockwise-quantized
  // integers, one float32 scale per 256 values (src/comm/quantize.h), decoded on arrival; a
  // reduce-scatter sums the decoded values in float32 and rounds once. 0: the values as they are.
  int quantize_bits = 0;
};

struct CommunicatorOptions {
  // Compare op, dtype, sizes and root across ranks before each collective (one small extra
  // all-reduce). Turn off only for measured hot paths whose call sequence is known to match.
  bool check_consistency = true;
  // Reductions larger than this many bytes per MPI call are split into pieces of this size.
  // OpenMPI 4.1's shared-memory reductions drop from ~4 GB/s to ~0.5 GB/s from a few MB on, and
  // 1 MiB pieces keep them at full speed (docs/PERFORMANCE.md). 0 never splits.
  int64_t reduction_piece_bytes = 1 << 20;
  // Pieces of asynchronous collectives in flight at once on the communicator (all collectives
  // together: their pieces start in call order, see src/comm/piece_queue.h).
  int pieces_in_flight = 2;
  // Sums and averages of float32 and bfloat16 as exchanges (MPI's all-to-all, then this rank's
  // share summed here in rank order, in float32, and for an all-reduce an all-gather of the
  // sums) instead of MPI's reductions: bfloat16 travels as 16 bits, every rank holds the same
  // bits, and OpenMPI 4.1's shared-memory reductions are 2-3 times slower (docs/PERFORMANCE.md).
  bool exchange_reductions = true;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi", "local", "nccl"
  // Bytes this rank has sent to ranks on other hosts in this communicator's collectives so far,
  // counted exactly; -1 where the backend cannot tell (MPI's own collectives choose their
  // algorithms, and with them who sends what to whom). 0 for a world of one.
  virtual int64_t inter_node_bytes() const { return -1; }

  // In place: every rank ends with op over all ranks' `tensor`.
  virtual std::shared_ptr<Work> all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum,
                                           const CollectiveOptions& options = {}) = 0;
  // input.numel() == size() × output.numel(): rank r receives op over all ranks of chunk r.
  virtual std::shared_ptr<Work> reduce_scatter(const at::Tensor& input, const at::Tensor& output,
                                               ReduceOp op = ReduceOp::kSum, const CollectiveOptions& options = {}) = 0;
  // output.numel() == size() × input.numel(): chunk r of output is rank r's input.
  virtual std::shared_ptr<Work> all_gather(const at::Tensor& input, const at::Tensor& output,
                                           const CollectiveOptions& options = {}) = 0;
  // In place: every rank ends with `root`'s tensor.
  virtual std::shared_ptr<Work> broadcast(const at::Tensor& tensor, int root,
                                          const CollectiveOptions& options = {}) = 0;
  // input and output hold size() equal chunks: chunk j of rank i's input lands in chunk i of rank j's output.
  virtual std::shared_ptr<Work> all_to_all(const at::Tensor& input, const at::Tensor& output,
                                           const CollectiveOptions& options = {}) = 0;
  // Variable counts (MPI's alltoallv; expert parallelism's exchange): rank i sends the next
  // send_counts[j] elements of `input` (rank by rank, back to back) to rank j, and receives
  // receive_counts[j] elements from rank j into `output`, rank by rank. The counts must match
  // pairwise (the caller exchanged them first). This default sends them through all_to_all, each
  // pair's chunk padded to the largest count of any pair (one all-reduce agrees on it); MPI sends
  // the elements alone.
  virtual std::shared_ptr<Work> all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                                             const at::Tensor& output, const std::vector<int64_t>& receive_counts,
                                             const CollectiveOptions& options = {});
  virtual std::shared_ptr<Work> barrier(const CollectiveOptions& options = {}) = 0;

  // Collective over this group: ranks passing the same color form a new communicator, ordered by
  // key then rank. A negative color takes no part and gets nullptr.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
};

// Collective error agreement, for work that touches files on some ranks only: every rank learns
// whether any rank failed (`error` not empty there). The failing rank throws zero::Error with its
// own error; the others throw one naming the lowest failing rank and `what`. One 4-byte
// all-reduce, so no rank is left waiting in the next collective.
void agree(Communicator& comm, const std::string& error, int rank, const std::string& what);

}  // namespace zero
