#include "comm/mpi_communicator.h"

#include "comm/all_to_all_v.h"

#include <ATen/ATen.h>
#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <climits>

#include "comm/collective_checks.h"
#include "comm/quantized_collectives.h"
#include "comm/mpi_work.h"
#include "comm/progress.h"
#include "kernels/sum_kernels.h"
#include "zero/error.h"

namespace zero::comm_detail {
namespace {

// 16-bit floats travel as raw 16-bit words where no arithmetic happens; reductions stage them
// through float32 instead, piece by piece (see all_reduce and reduce_scatter).
MPI_Datatype mpi_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kHalf:
    case at::kBFloat16:
      return MPI_UINT16_T;
    case at::kChar:
      return MPI_INT8_T;
    case at::kByte:
      return MPI_UINT8_T;
    case at::kInt:
      return MPI_INT32_T;
    case at::kLong:
      return MPI_INT64_T;
    default:
      return MPI_DATATYPE_NULL;  // rejected earlier by check_tensor
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  return MPI_OP_NULL;
}

int mpi_count(int64_t n, CollectiveOp op, int rank) {
  if (n > INT_MAX) {
    throw Error(
        fmt::format("{}: {} elements per rank exceed MPI's limit of {}; split the buffer", to_string(op), n, INT_MAX),
        to_string(op), rank);
  }
  return static_cast<int>(n);
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, const CommunicatorOptions& options) : comm_(comm), options_(options) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  queue_ = std::make_shared<PieceQueue>(static_cast<size_t>(std::max(options_.pieces_in_flight, 1)), rank_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  queue_.reset();  // waits for the pieces in flight (unless a Work still holds the queue)
  if (!finalized && comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
}

void MpiCommunicator::check(int code, const char* what) const {
  if (code != MPI_SUCCESS) throw Error(fmt::format("{} failed: {}", what, mpi_error_string(code)), what, rank_);
}

void MpiCommunicator::validate(CollectiveOp op, const std::function<void()>& local_checks, const at::Tensor* tensor,
                               int64_t count, int64_t extra) {
  if (!options_.check_consistency || size_ == 1) {
    local_checks();
    return;
  }
  std::exception_ptr local_error;
  try {
    local_checks();
  } catch (const Error&) {
    local_error = std::current_exception();
  }
  const int64_t dtype = tensor && tensor->defined() ? static_cast<int64_t>(tensor->scalar_type()) : -1;
  const int64_t mine[5] = {local_error ? rank_ : -1, static_cast<int64_t>(op), dtype, count, extra};
  // One all-reduce(MAX) of the signature and its negation yields both max and min of every field.
  int64_t both[10];
  for (int i = 0; i < 5; ++i) {
    both[i] = mine[i];
    both[i + 5] = -mine[i];
  }
  queue_->start_all(progress_);  // a blocking collective comes after every one already called
  {
    comm_detail::BlockedScope blocked(to_string(op));  // a rank that never comes is seen waiting here first
    if (progress_) {
      MPI_Request request = MPI_REQUEST_NULL;
      check(MPI_Iallreduce(MPI_IN_PLACE, both, 10, MPI_INT64_T, MPI_MAX, comm_, &request), "consistency check");
      for (int done = 0; !done;) {
        check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "consistency check");
        if (!done) progress_();
      }
    } else {
      check(MPI_Allreduce(MPI_IN_PLACE, both, 10, MPI_INT64_T, MPI_MAX, comm_), "consistency check");
    }
  }
  std::string name = to_string(op);
  if (local_error) std::rethrow_exception(local_error);
  if (both[0] >= 0)
    throw Error(fmt::format("{}: rank {} passed invalid arguments (see its error)", name, both[0]), name, rank_);
  auto differs = [&](int i) { return both[i] != -both[i + 5]; };
  auto other = [&](int i) { return both[i] != mine[i] ? both[i] : -both[i + 5]; };
  if (differs(1)) {
    throw Error(fmt::format("ranks are not calling the same collective: this rank calls {}, another calls {}", name,
                            to_string(static_cast<CollectiveOp>(other(1)))),
                name, rank_);
  }
  if (differs(2)) {
    throw Error(fmt::format("{}: ranks disagree on the dtype: this rank has {}, another has {}", name,
                            dtype_name(static_cast<at::ScalarType>(mine[2])),
                            dtype_name(static_cast<at::ScalarType>(other(2)))),
                name, rank_);
  }
  if (differs(3)) {
    throw Error(fmt::format("{}: ranks disagree on the size: this rank has {} elements, others range from {} to {}",
                            name, mine[3], -both[8], both[3]),
                name, rank_);
  }
  if (differs(4)) {
    const bool root = op == CollectiveOp::kBroadcast;
    auto show = [&](int64_t v) { return root ? std::to_string(v) : std::string(to_string(static_cast<ReduceOp>(v))); };
    throw Error(fmt::format("{}: ranks disagree on the {}: this rank has {}, another has {}", name,
                            root ? "root" : "reduce op", show(mine[4]), show(other(4))),
                name, rank_);
  }
}

namespace {

// A collective whose waiter keeps `progress` going: see set_progress_while_waiting.
class PollingWork : public Work {
 public:
  PollingWork(std::shared_ptr<Work> inner, std::function<void()> progress, const char* what)
      : inner_(std::move(inner)), progress_(std::move(progress)), what_(what) {}
  void wait() override {
    comm_detail::BlockedScope blocked(what_);
    while (!inner_->test()) progress_();
  }
  bool test() override { return inner_->test(); }
  std::string error() const override { return inner_->error(); }

 private:
  std::shared_ptr<Work> inner_;
  std::function<void()> progress_;
  const char* what_;
};

}  // namespace

std::shared_ptr<Work> MpiCommunicator::launch(const char* what, const CollectiveOptions& options,
                                              std::vector<MpiPiece> pieces, std::vector<at::Tensor> keep_alive) {
  if (!options.async && !progress_) {
    queue_->start_all();  // a blocking collective comes after every one already called
    comm_detail::BlockedScope blocked(what);
    check(run_pieces(pieces), what);
    return std::make_shared<CompletedWork>();
  }
  auto work = std::make_shared<QueuedWork>(queue_, queue_->submit(what, std::move(pieces), std::move(keep_alive)), rank_);
  if (!progress_) return work;
  // Note: MPI's blocking collectives would not return to poll the other exchanges, whose peers
  // may be waiting for this rank (a hierarchical world's exchanges while an hpZ group gathers).
  auto polling = std::make_shared<PollingWork>(std::move(work), progress_, what);
  if (!options.async) polling->wait();
  return polling;
}

std::shared_ptr<Work> MpiCommunicator::launch(const char* what, const CollectiveOptions& options,
                                              std::function<int(MPI_Request*)> start, std::function<int()> run,
                                              std::vector<at::Tensor> keep_alive) {
  std::vector<MpiPiece> pieces(1);
  pieces[0].start = std::move(start);
  pieces[0].run = std::move(run);
  pieces[0].buffers = [keep_alive] { return keep_alive; };
  return launch(what, options, std::move(pieces), std::move(keep_alive));
}

int64_t MpiCommunicator::piece_elements(int64_t total, int64_t bytes_per_element, CollectiveOp op) const {
  const int64_t limit = options_.reduction_piece_bytes;
  int64_t per_piece = limit > 0 ? std::max<int64_t>(1, limit / bytes_per_element) : std::max<int64_t>(1, total);
  mpi_count(std::min(per_piece, total), op, rank_);  // throws past INT_MAX elements
  return per_piece;
}

bool MpiCommunicator::exchanges(const at::Tensor& t, ReduceOp op) const {
  return options_.exchange_reductions && size_ > 1 && (op == ReduceOp::kSum || op == ReduceOp::kAvg) &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16) && t.numel() <= INT_MAX;
}

std::vector<MpiPiece> MpiCommunicator::exchange_reduce_pieces(const at::Tensor& input, const std::vector<int64_t>& first,
                                                              const std::vector<int64_t>& length, const at::Tensor& out,
                                                              ReduceOp op) {
  const int size = size_, me = rank_;
  const MPI_Comm comm = comm_;
  const MPI_Datatype type = mpi_type(input.scalar_type());
  const at::ScalarType dtype = input.scalar_type();
  const int64_t element = input.element_size();
  // A piece receives about reduction_piece_bytes: `columns` elements from each rank.
  const int64_t columns = std::max<int64_t>(1, piece_elements(input.numel(), element, CollectiveOp::kReduceScatter) / size);
  const int64_t longest = *std::max_element(length.begin(), length.end());
  const float divisor = op == ReduceOp::kAvg ? static_cast<float>(size) : 1.0f;
  std::vector<MpiPiece> pieces;
  for (int64_t offset = 0; offset < longest || pieces.empty(); offset += columns) {
    auto width = [&](int r) { return std::clamp<int64_t>(length[r] - offset, 0, columns); };
    const int64_t mine = width(me);
    // MPI_Alltoallv's send counts and displacements, receive counts and displacements (elements).
    auto counts = std::make_shared<std::array<std::vector<int>, 4>>();
    for (auto& v : *counts) v.resize(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) {
      (*counts)[0][r] = r == me ? 0 : static_cast<int>(width(r));  // this rank's own terms stay in place
      (*counts)[1][r] = static_cast<int>(first[r] + std::min(offset, length[r]));
      (*counts)[2][r] = r == me ? 0 : static_cast<int>(mine);
      (*counts)[3][r] = static_cast<int>(r * mine);
    }
    auto received = std::make_shared<at::Tensor>();  // row r: rank r's terms (this rank's row unused)
    MpiPiece piece;
    piece.prepare = [=, pool = staging_] { *received = pool->acquire(size * mine, dtype); };
    piece.start = [=](MPI_Request* request) {
      const auto& c = *counts;
      return MPI_Ialltoallv(input.data_ptr(), c[0].data(), c[1].data(), type, received->data_ptr(), c[2].data(),
                            c[3].data(), type, comm, request);
    };
    piece.run = [=] {
      const auto& c = *counts;
      return MPI_Alltoallv(input.data_ptr(), c[0].data(), c[1].data(), type, received->data_ptr(), c[2].data(),
                           c[3].data(), type, comm);
    };
    piece.finish = [=] {
      // The terms in rank order, this rank's read where they are (`out` may be them).
      auto* own = static_cast<const char*>(input.data_ptr()) + (first[me] + offset) * element;
      auto* from = static_cast<const char*>(received->data_ptr());
      std::vector<const void*> terms(static_cast<size_t>(size));
      for (int r = 0; r < size; ++r) terms[r] = r == me ? own : from + r * mine * element;
      void* target = static_cast<char*>(out.data_ptr()) + offset * element;
      if (dtype == at::kBFloat16) {
        kernels::sum_rows_bf16(reinterpret_cast<const uint16_t* const*>(terms.data()), size, mine, divisor,
                               static_cast<uint16_t*>(target));
      } else {
        kernels::sum_rows(reinterpret_cast<const float* const*>(terms.data()), size, mine, divisor,
                          static_cast<float*>(target));
      }
    };
    piece.buffers = [input, received] { return std::vector<at::Tensor>{input, *received}; };
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

std::vector<MpiPiece> MpiCommunicator::exchange_gather_pieces(const at::Tensor& flat, const std::vector<int64_t>& first,
                                                              const std::vector<int64_t>& length, size_t count) {
  const MPI_Comm comm = comm_;
  const MPI_Datatype type = mpi_type(flat.scalar_type());
  const int64_t longest = *std::max_element(length.begin(), length.end());
  const int64_t columns = std::max<int64_t>(1, (longest + static_cast<int64_t>(count) - 1) / static_cast<int64_t>(count));
  std::vector<MpiPiece> pieces(count);
  for (size_t k = 0; k < count; ++k) {
    const int64_t offset = static_cast<int64_t>(k) * columns;
    auto counts = std::make_shared<std::array<std::vector<int>, 2>>();  // receive counts, displacements
    for (int r = 0; r < size_; ++r) {
      (*counts)[0].push_back(static_cast<int>(std::clamp<int64_t>(length[r] - offset, 0, columns)));
      (*counts)[1].push_back(static_cast<int>(first[r] + std::min(offset, length[r])));
    }
    pieces[k].start = [=](MPI_Request* request) {
      return MPI_Iallgatherv(MPI_IN_PLACE, 0, type, flat.data_ptr(), (*counts)[0].data(), (*counts)[1].data(), type,
                             comm, request);
    };
    pieces[k].run = [=] {
      return MPI_Allgatherv(MPI_IN_PLACE, 0, type, flat.data_ptr(), (*counts)[0].data(), (*counts)[1].data(), type, comm);
    };
    pieces[k].buffers = [flat] { return std::vector<at::Tensor>{flat}; };
  }
  return pieces;
}

std::shared_ptr<Work> MpiCommunicator::all_reduce(const at::Tensor& tensor, ReduceOp op,
                                                  const CollectiveOptions& options) {
  validate(
      CollectiveOp::kAllReduce, [&] { check_tensor(CollectiveOp::kAllReduce, "input", tensor, true, rank_); }, &tensor,
      tensor.numel(), static_cast<int64_t>(op));
  const at::Tensor flat = tensor.view(-1);
  const int64_t n = flat.numel();
  if (exchanges(tensor, op)) {
    // A reduce-scatter of rank r's share [r·c, (r + 1)·c) into itself, then each piece's sums
    // all-gathered in place: every rank ends with the same bits, summed once in rank order.
    const int64_t c = (n + size_ - 1) / size_;
    std::vector<int64_t> first(static_cast<size_t>(size_)), length(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      first[r] = std::min(n, r * c);
      length[r] = std::clamp<int64_t>(n - r * c, 0, c);
    }
    std::vector<MpiPiece> pieces =
        exchange_reduce_pieces(flat, first, length, flat.narrow(0, first[rank_], length[rank_]), op);
    std::vector<MpiPiece> gathers = exchange_gather_pieces(flat, first, length, pieces.size());
    gathers.front().after_earlier = true;  // once every sum is in place
    for (auto& piece : gathers) pieces.push_back(std::move(piece));
    return launch("all_reduce", options, std::move(pieces), {tensor});
  }
  const bool staged = is_16bit_float(tensor);  // reduced through float32
  const MPI_Datatype type = staged ? MPI_FLOAT : mpi_type(tensor.scalar_type());
  const int64_t per_piece = piece_elements(n, staged ? 4 : tensor.element_size(), CollectiveOp::kAllReduce);
  const MPI_Comm comm = comm_;
  const int size = size_;
  std::vector<MpiPiece> pieces;
  for (int64_t offset = 0; offset < n || pieces.empty(); offset += per_piece) {
    const at::Tensor slice = flat.narrow(0, offset, std::min(per_piece, n - offset));
    const int count = static_cast<int>(slice.numel());
    auto buffer = std::make_shared<at::Tensor>(slice);
    MpiPiece piece;
    if (staged) {
      piece.prepare = [buffer, slice, pool = staging_] {
        *buffer = pool->acquire(slice.numel(), at::kFloat);
        buffer->copy_(slice);
      };
    }
    piece.start = [=](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, buffer->data_ptr(), count, type, mpi_op(op), comm, r);
    };
    piece.run = [=] { return MPI_Allreduce(MPI_IN_PLACE, buffer->data_ptr(), count, type, mpi_op(op), comm); };
    piece.finish = [=] {
      divide_for_average(*buffer, op, size);
      if (staged) slice.copy_(*buffer);
    };
    piece.buffers = [buffer] { return std::vector<at::Tensor>{*buffer}; };
    pieces.push_back(std::move(piece));
  }
  return launch("all_reduce", options, std::move(pieces), {tensor});
}

std::shared_ptr<Work> MpiCommunicator::reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                                                      const CollectiveOptions& options) {
  if (options.quantize_bits) return comm_detail::quantized_reduce_scatter(*this, input, output, op, options);
  validate(
      CollectiveOp::kReduceScatter,
      [&] { check_pair(CollectiveOp::kReduceScatter, input, output, size_, 1, true, rank_); }, &input, input.numel(),
      static_cast<int64_t>(op));
  const int64_t chunk = output.numel();
  const at::Tensor rows = input.view({size_, chunk});  // row r goes to rank r
  const at::Tensor out = output.view(-1);
  if (exchanges(input, op)) {  // the same choice on every rank: op and dtype agree (validate)
    // The sums land in `output` while other pieces still send from the input: an output that
    // overlaps the input anywhere but as this rank's own row (which is never sent) reads a copy.
    const bool own_row = output.data_ptr() == rows[rank_].data_ptr();
    const at::Tensor source = overlaps(input, output) && !own_row ? input.clone() : input;
    std::vector<int64_t> first(static_cast<size_t>(size_)), length(static_cast<size_t>(size_), chunk);
    for (int r = 0; r < size_; ++r) first[r] = r * chunk;
    return launch("reduce_scatter", options, exchange_reduce_pieces(source.view(-1), first, length, out, op),
                  {input, output});
  }
  const bool staged = is_16bit_float(input);
  const MPI_Datatype type = staged ? MPI_FLOAT : mpi_type(input.scalar_type());
  // A piece takes the same column range of every row, so one MPI call moves size × columns elements.
  const int64_t columns = std::max<int64_t>(
      1, piece_elements(input.numel(), staged ? 4 : input.element_size(), CollectiveOp::kReduceScatter) / size_);
  const MPI_Comm comm = comm_;
  const int size = size_;
  std::vector<MpiPiece> pieces;
  for (int64_t offset = 0; offset < chunk || pieces.empty(); offset += columns) {
    const int64_t width = std::min(columns, chunk - offset);
    const at::Tensor block = rows.narrow(1, offset, width);  // contiguous only when it is the whole input
    const at::Tensor target = out.narrow(0, offset, width);
    // MPI forbids overlapping send and receive buffers (ZeRO reduces a bucket into a slice of itself).
    const bool separate_receive = staged || overlaps(input, target);
    auto send = std::make_shared<at::Tensor>(block);
    auto receive = std::make_shared<at::Tensor>(target);
    MpiPiece piece;
    piece.prepare = [=, pool = staging_] {
      if (staged || !block.is_contiguous()) {  // pack the columns (and widen 16-bit floats)
        *send = pool->acquire(block.numel(), staged ? at::kFloat : block.scalar_type()).view(block.sizes());
        send->copy_(block);
      }
      if (separate_receive) *receive = pool->acquire(width, send->scalar_type());
    };
    piece.start = [=](MPI_Request* r) {
      return MPI_Ireduce_scatter_block(send->data_ptr(), receive->data_ptr(), static_cast<int>(width), type, mpi_op(op),
                                       comm, r);
    };
    piece.run = [=] {
      return MPI_Reduce_scatter_block(send->data_ptr(), receive->data_ptr(), static_cast<int>(width), type, mpi_op(op),
                                      comm);
    };
    piece.finish = [=] {
      divide_for_average(*receive, op, size);
      if (separate_receive) target.copy_(*receive);
    };
    piece.buffers = [send, receive] { return std::vector<at::Tensor>{*send, *receive}; };
    pieces.push_back(std::move(piece));
  }
  if (pieces.size() > 1 && !options.async) {
    // Note: several pieces run faster through the window even when the caller waits at once:
    // packing the next piece overlaps the transfer of this one (bench_comm: 2.2 vs 1.4 GB/s at 64 MB).
    launch("reduce_scatter", CollectiveOptions{.async = true}, std::move(pieces), {input, output})->wait();
    return std::make_shared<CompletedWork>();
  }
  return launch("reduce_scatter", options, std::move(pieces), {input, output});
}

std::shared_ptr<Work> MpiCommunicator::all_gather(const at::Tensor& input, const at::Tensor& output,
                                                  const CollectiveOptions& options) {
  if (options.quantize_bits) return comm_detail::quantized_all_gather(*this, input, output, options);
  validate(
      CollectiveOp::kAllGather, [&] { check_pair(CollectiveOp::kAllGather, input, output, 1, size_, true, rank_); },
      &input, input.numel(), 0);
  const int count = mpi_count(input.numel(), CollectiveOp::kAllGather, rank_);
  const MPI_Datatype type = mpi_type(input.scalar_type());
  const void* send = input.data_ptr();
  at::Tensor staged;
  if (input.numel() > 0 && input.data_ptr() == static_cast<char*>(output.data_ptr()) + rank_ * input.nbytes()) {
    send = MPI_IN_PLACE;  // the input already is this rank's chunk of the output
  } else if (overlaps(input, output)) {
    staged = input.clone();
    send = staged.data_ptr();
  }
  void* receive = output.data_ptr();
  return launch(
      "all_gather", options,
      [=, comm = comm_](MPI_Request* r) { return MPI_Iallgather(send, count, type, receive, count, type, comm, r); },
      [=, comm = comm_] { return MPI_Allgather(send, count, type, receive, count, type, comm); },
      {input, output, staged});
}

std::shared_ptr<Work> MpiCommunicator::broadcast(const at::Tensor& tensor, int root, const CollectiveOptions& options) {
  validate(
      CollectiveOp::kBroadcast,
      [&] {
        check_tensor(CollectiveOp::kBroadcast, "input", tensor, true, rank_);
        check_root(root, size_, rank_);
      },
      &tensor, tensor.numel(), root);
  void* data = tensor.data_ptr();
  const int count = mpi_count(tensor.numel(), CollectiveOp::kBroadcast, rank_);
  const MPI_Datatype type = mpi_type(tensor.scalar_type());
  return launch(
      "broadcast", options, [=, comm = comm_](MPI_Request* r) { return MPI_Ibcast(data, count, type, root, comm, r); },
      [=, comm = comm_] { return MPI_Bcast(data, count, type, root, comm); }, {tensor});
}

std::shared_ptr<Work> MpiCommunicator::all_to_all(const at::Tensor& input, const at::Tensor& output,
                                                  const CollectiveOptions& options) {
  validate(
      CollectiveOp::kAllToAll,
      [&] {
        check_pair(CollectiveOp::kAllToAll, input, output, 1, 1, true, rank_);
        if (input.numel() % size_ != 0) {
          throw Error(fmt::format("all_to_all: input {} does not split into {} equal chunks", describe(input), size_),
                      "all_to_all", rank_);
        }
      },
      &input, input.numel(), 0);
  at::Tensor send = overlaps(input, output) ? input.clone() : input;
  const int count = mpi_count(input.numel() / size_, CollectiveOp::kAllToAll, rank_);
  const MPI_Datatype type = mpi_type(input.scalar_type());
  return launch(
      "all_to_all", options,
      [=, comm = comm_](MPI_Request* r) {
        return MPI_Ialltoall(send.data_ptr(), count, type, output.data_ptr(), count, type, comm, r);
      },
      [=, comm = comm_] { return MPI_Alltoall(send.data_ptr(), count, type, output.data_ptr(), count, type, comm); },
      {send, output});
}

std::shared_ptr<Work> MpiCommunicator::all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                                                    const at::Tensor& output, const std::vector<int64_t>& receive_counts,
                                                    const CollectiveOptions& options) {
  // (The counts differ per rank: the consistency check compares the call and the dtype only.)
  validate(
      CollectiveOp::kAllToAll, [&] { check_all_to_all_v(*this, input, send_counts, output, receive_counts); }, &input, 0,
      1);
  // Counts and displacements in one int tensor kept alive with the call (MPI reads them until the
  // non-blocking call completes).
  at::Tensor layout = at::empty({4 * size_}, at::kInt);
  int* counts = layout.data_ptr<int>();
  int64_t sent = 0, received = 0;
  for (int r = 0; r < size_; ++r) {
    counts[r] = mpi_count(send_counts[static_cast<size_t>(r)], CollectiveOp::kAllToAll, rank_);
    counts[size_ + r] = mpi_count(sent, CollectiveOp::kAllToAll, rank_);
    counts[2 * size_ + r] = mpi_count(receive_counts[static_cast<size_t>(r)], CollectiveOp::kAllToAll, rank_);
    counts[3 * size_ + r] = mpi_count(received, CollectiveOp::kAllToAll, rank_);
    sent += send_counts[static_cast<size_t>(r)];
    received += receive_counts[static_cast<size_t>(r)];
  }
  at::Tensor send = overlaps(input, output) ? input.clone() : input;
  const MPI_Datatype type = mpi_type(input.scalar_type());
  const int n = size_;
  return launch(
      "all_to_all_v", options,
      [=, comm = comm_](MPI_Request* r) {
        const int* c = layout.data_ptr<int>();
        return MPI_Ialltoallv(send.data_ptr(), c, c + n, type, output.data_ptr(), c + 2 * n, c + 3 * n, type, comm, r);
      },
      [=, comm = comm_] {
        const int* c = layout.data_ptr<int>();
        return MPI_Alltoallv(send.data_ptr(), c, c + n, type, output.data_ptr(), c + 2 * n, c + 3 * n, type, comm);
      },
      {send, output, layout});
}

std::shared_ptr<Work> MpiCommunicator::barrier(const CollectiveOptions& options) {
  validate(
      CollectiveOp::kBarrier, [] {}, nullptr, 0, 0);
  return launch(
      "barrier", options, [comm = comm_](MPI_Request* r) { return MPI_Ibarrier(comm, r); },
      [comm = comm_] { return MPI_Barrier(comm); }, {});
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  MPI_Comm child = MPI_COMM_NULL;
  queue_->start_all(progress_);
  check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &child), "split");
  if (child == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiCommunicator>(child, options_);
}

}  // namespace zero::comm_detail
