#include "comm/hierarchical_communicator.h"

#include "comm/all_to_all_v.h"

#include <ATen/ATen.h>
#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <thread>

#include "comm/collective_checks.h"
#include "comm/progress.h"
#include "comm/quantize.h"
#include "comm/quantized_collectives.h"
#include "zero/error.h"

namespace zero::comm_detail {

// This rank's node and column. With equal nodes, `node` lists this node's ranks in rank order
// (this rank's local index is its place there) and `column` the ranks of every node with the same
// local index, in node order. With unequal nodes the node is this rank alone and the column is
// every rank: one direct exchange.
struct ExchangeGroups {
  int me = 0;
  std::vector<int> node;
  std::vector<int> column;                // columns[local_index[me]]
  std::vector<std::vector<int>> columns;  // by local index
  std::vector<int> local_index;           // of every rank
  std::vector<int> node_of;               // of every rank, as World numbers the nodes
};

namespace {

at::ScalarType accumulator_type(const at::Tensor& t) { return is_16bit_float(t) ? at::kFloat : t.scalar_type(); }

void combine(at::Tensor& into, const at::Tensor& term, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      into.add_(term);
      return;
    case ReduceOp::kMax:
      at::maximum_out(into, into, term);
      return;
    case ReduceOp::kMin:
      at::minimum_out(into, into, term);
      return;
  }
}

// `out` = op over `terms` in order, in the accumulator's dtype.
void reduce_terms(at::Tensor& out, const std::vector<at::Tensor>& terms, ReduceOp op) {
  out.copy_(terms[0]);
  for (size_t i = 1; i < terms.size(); ++i) combine(out, terms[i].to(out.scalar_type()), op);
}

}  // namespace

HierarchicalCommunicator::HierarchicalCommunicator(std::unique_ptr<MpiCommunicator> flat,
                                                   std::vector<int> node_of_rank)
    : flat_(std::move(flat)) {
  const int n = flat_->size(), me = flat_->rank();
  std::map<int, std::vector<int>> nodes;
  for (int r = 0; r < n; ++r) nodes[node_of_rank[static_cast<size_t>(r)]].push_back(r);
  const size_t per_node = nodes.begin()->second.size();
  const bool equal = std::all_of(nodes.begin(), nodes.end(), [&](const auto& kv) { return kv.second.size() == per_node; });
  auto g = std::make_shared<ExchangeGroups>();
  g->me = me;
  g->node_of = std::move(node_of_rank);
  g->local_index.assign(static_cast<size_t>(n), 0);
  if (equal) {
    g->columns.assign(per_node, {});
    for (const auto& [node, ranks] : nodes) {
      for (size_t l = 0; l < ranks.size(); ++l) {
        g->columns[l].push_back(ranks[l]);
        g->local_index[static_cast<size_t>(ranks[l])] = static_cast<int>(l);
      }
    }
    g->node = nodes[g->node_of[static_cast<size_t>(me)]];
  } else {
    g->node = {me};
    g->columns.assign(1, {});
    for (int r = 0; r < n; ++r) g->columns[0].push_back(r);
  }
  g->column = g->columns[static_cast<size_t>(g->local_index[static_cast<size_t>(me)])];
  groups_ = g;
  flat_->set_progress_while_waiting([progress = progress_] { progress->poll(); });
  MPI_Comm_dup(flat_->handle(), &exchange_comm_);
  MPI_Comm_set_errhandler(exchange_comm_, MPI_ERRORS_RETURN);
  int* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(exchange_comm_, MPI_TAG_UB, &tag_ub, &found);
  if (found && tag_ub) tag_limit_ = *tag_ub;
}

HierarchicalCommunicator::~HierarchicalCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&exchange_comm_);
}

std::shared_ptr<Work> HierarchicalCommunicator::start(const char* what, const CollectiveOptions& options,
                                                      std::vector<ExchangeStage> stages,
                                                      std::vector<at::Tensor> keep_alive) {
  // Count what leaves the node as each stage is made, then keep the caller's tensors alive.
  for (auto& stage : stages) {
    stage.make = [make = std::move(stage.make), counted = inter_node_bytes_, g = groups_](auto& sends,
                                                                                        auto& receives) {
      make(sends, receives);
      const int mine = g->node_of[static_cast<size_t>(g->me)];
      for (const auto& m : sends) {
        if (g->node_of[static_cast<size_t>(m.peer)] != mine) *counted += static_cast<int64_t>(m.data.nbytes());
      }
    };
  }
  if (!stages.empty()) {
    auto& last = stages.back().finish;
    last = [finish = std::move(last), keep_alive = std::move(keep_alive)] {
      if (finish) finish();
    };
  }
  const int cycle = std::max(1, tag_limit_ / ExchangeWork::kMaxStages);
  const int tag_base = static_cast<int>(sequence_++ % cycle) * ExchangeWork::kMaxStages;
  auto work = std::make_shared<ExchangeWork>(what, exchange_comm_, rank(), tag_base, std::move(stages), progress_);
  progress_->add(work);
  if (!options.async) work->wait();
  return work;
}

namespace {

at::Tensor row(const at::Tensor& rows, int r) { return rows.select(0, r); }

// How a row of c values travels: as it is, or (ZeRO++'s qgZ) quantized to `bits`.
struct RowWire {
  int bits;
  int64_t c;
  at::Tensor encode(const at::Tensor& values) const { return bits ? quantize_blocks(values, bits) : values; }
  at::Tensor buffer(const at::TensorOptions& values) const {
    return bits ? at::empty({quantized_bytes(c, bits)}, values.dtype(at::kByte)) : at::empty({c}, values);
  }
  at::Tensor decode(const at::Tensor& message) const { return bits ? dequantize_blocks(message, c, bits) : message; }
};

// Reduce-scatter of `rows` (one row of c elements per rank, in rank order) into `result` (c
// elements in the accumulator dtype): within the node, then across nodes. With `bits`, every
// message is quantized (this rank's own terms stay exact) and decoded before it is summed.
void add_reduce_scatter(std::vector<ExchangeStage>& stages, std::shared_ptr<const ExchangeGroups> g, at::Tensor rows,
                        at::Tensor result, ReduceOp op, int bits = 0) {
  const int64_t c = rows.size(1);
  const RowWire wire{bits, c};
  const size_t height = g->column.size();
  // The node's partial sums of this rank's column's rows, in column order.
  auto partial = std::make_shared<at::Tensor>();
  auto from_node = std::make_shared<std::vector<at::Tensor>>();  // [local peer][column position]
  stages.push_back(ExchangeStage{
      [=](std::vector<Message>& sends, std::vector<Message>& receives) {
        for (int peer : g->node) {
          if (peer == g->me) continue;
          for (int r : g->columns[static_cast<size_t>(g->local_index[static_cast<size_t>(peer)])]) {
            sends.push_back({peer, wire.encode(row(rows, r))});
          }
          for (size_t k = 0; k < height; ++k) {
            from_node->push_back(wire.buffer(rows.options()));
            receives.push_back({peer, from_node->back()});
          }
        }
      },
      [=] {
        *partial = at::empty({static_cast<int64_t>(height), c}, rows.options().dtype(result.scalar_type()));
        for (size_t k = 0; k < height; ++k) {
          std::vector<at::Tensor> terms;  // the node's ranks in rank order
          size_t peer_index = 0;
          for (int peer : g->node) {
            terms.push_back(peer == g->me ? row(rows, g->column[k]) : wire.decode((*from_node)[peer_index++ * height + k]));
          }
          at::Tensor out = partial->select(0, static_cast<int64_t>(k));
          reduce_terms(out, terms, op);
        }
        from_node->clear();
      }});
  auto from_column = std::make_shared<std::vector<at::Tensor>>();  // by column position
  stages.push_back(ExchangeStage{
      [=](std::vector<Message>& sends, std::vector<Message>& receives) {
        for (size_t k = 0; k < height; ++k) {
          const int peer = g->column[k];
          if (peer == g->me) continue;
          sends.push_back({peer, wire.encode(partial->select(0, static_cast<int64_t>(k)))});
          from_column->push_back(wire.buffer(partial->options()));
          receives.push_back({peer, from_column->back()});
        }
      },
      [=] {
        std::vector<at::Tensor> terms;  // the nodes in column order
        size_t received = 0;
        for (size_t k = 0; k < height; ++k) {
          terms.push_back(g->column[k] == g->me ? partial->select(0, static_cast<int64_t>(k))
                                                : wire.decode((*from_column)[received++]));
        }
        at::Tensor out = result;
        reduce_terms(out, terms, op);
        from_column->clear();
        partial->reset();
      }});
}

// All-gather into `rows` (one row per rank, this rank's row already filled): across nodes, then
// within the node.
void add_all_gather(std::vector<ExchangeStage>& stages, std::shared_ptr<const ExchangeGroups> g, at::Tensor rows) {
  stages.push_back(ExchangeStage{[=](std::vector<Message>& sends, std::vector<Message>& receives) {
                                   for (int peer : g->column) {
                                     if (peer == g->me) continue;
                                     sends.push_back({peer, row(rows, g->me)});
                                     receives.push_back({peer, row(rows, peer)});
                                   }
                                 },
                                 {}});
  stages.push_back(ExchangeStage{
      [=](std::vector<Message>& sends, std::vector<Message>& receives) {
        for (int peer : g->node) {
          if (peer == g->me) continue;
          for (int r : g->column) sends.push_back({peer, row(rows, r)});
          for (int r : g->columns[static_cast<size_t>(g->local_index[static_cast<size_t>(peer)])]) {
            receives.push_back({peer, row(rows, r)});
          }
        }
      },
      {}});
}

}  // namespace

std::shared_ptr<Work> HierarchicalCommunicator::reduce_scatter(const at::Tensor& input, const at::Tensor& output,
                                                               ReduceOp op, const CollectiveOptions& options) {
  check_quantization(CollectiveOp::kReduceScatter, options, input, op, rank());
  flat_->validate(
      CollectiveOp::kReduceScatter,
      [&] { check_pair(CollectiveOp::kReduceScatter, input, output, size(), 1, true, rank()); }, &input,
      input.numel(), static_cast<int64_t>(op) + 16 * options.quantize_bits);
  const at::Tensor rows = input.view({size(), output.numel()});
  // Note: the result lands in its own buffer: ZeRO reduces a bucket into a slice of itself, and
  // the input's rows are read until the last stage.
  // A quantized reduction is summed in float32 (or wider) whatever travels.
  const at::ScalarType accumulator =
      options.quantize_bits ? at::promote_types(accumulator_type(input), at::kFloat) : accumulator_type(input);
  at::Tensor result = at::empty({output.numel()}, input.options().dtype(accumulator));
  std::vector<ExchangeStage> stages;
  add_reduce_scatter(stages, groups_, rows, result, op, options.quantize_bits);
  stages.back().finish = [finish = stages.back().finish, result, output, op, n = size()]() mutable {
    finish();
    divide_for_average(result, op, n);
    output.view(-1).copy_(result);
  };
  return start("reduce_scatter", options, std::move(stages), {input, output});
}

std::shared_ptr<Work> HierarchicalCommunicator::all_gather(const at::Tensor& input, const at::Tensor& output,
                                                           const CollectiveOptions& options) {
  if (options.quantize_bits) return quantized_all_gather(*this, input, output, options);
  flat_->validate(
      CollectiveOp::kAllGather, [&] { check_pair(CollectiveOp::kAllGather, input, output, 1, size(), true, rank()); },
      &input, input.numel(), 0);
  const at::Tensor rows = output.view({size(), input.numel()});
  at::Tensor mine = row(rows, rank());
  if (mine.data_ptr() != input.data_ptr()) {  // not already in place
    mine.copy_(overlaps(input, output) ? input.clone() : input);
  }
  std::vector<ExchangeStage> stages;
  add_all_gather(stages, groups_, rows);
  return start("all_gather", options, std::move(stages), {input, output});
}

std::shared_ptr<Work> HierarchicalCommunicator::all_reduce(const at::Tensor& tensor, ReduceOp op,
                                                           const CollectiveOptions& options) {
  flat_->validate(
      CollectiveOp::kAllReduce, [&] { check_tensor(CollectiveOp::kAllReduce, "input", tensor, true, rank()); },
      &tensor, tensor.numel(), static_cast<int64_t>(op));
  const int n = size();
  const int64_t c = (tensor.numel() + n - 1) / n;
  // Padded to n rows; the padding's values never reach the caller.
  at::Tensor rows = at::zeros({n, c}, tensor.options());
  rows.view(-1).narrow(0, 0, tensor.numel()).copy_(tensor.view(-1));
  at::Tensor reduced = at::empty({n, c}, tensor.options().dtype(accumulator_type(tensor)));
  std::vector<ExchangeStage> stages;
  add_reduce_scatter(stages, groups_, rows, row(reduced, rank()), op);
  add_all_gather(stages, groups_, reduced);
  stages.back().finish = [reduced, tensor, op, n]() mutable {
    divide_for_average(reduced, op, n);
    tensor.view(-1).copy_(reduced.view(-1).narrow(0, 0, tensor.numel()));
  };
  return start("all_reduce", options, std::move(stages), {tensor, rows});
}

std::shared_ptr<Work> HierarchicalCommunicator::broadcast(const at::Tensor& tensor, int root,
                                                          const CollectiveOptions& options) {
  flat_->validate(
      CollectiveOp::kBroadcast,
      [&] {
        check_tensor(CollectiveOp::kBroadcast, "input", tensor, true, rank());
        check_root(root, size(), rank());
      },
      &tensor, tensor.numel(), root);
  // From the root to its column (one rank per node), then from each of those within its node.
  // This node's rank in the root's column has the root's local index (unequal nodes: the node is
  // this rank alone, and the column, every rank, is reached in the first stage).
  auto g = groups_;
  const size_t root_index = static_cast<size_t>(g->local_index[static_cast<size_t>(root)]);
  const std::vector<int> root_column = g->columns[root_index];
  const int node_source = g->node[root_index];
  const at::Tensor data = tensor.view(-1);
  std::vector<ExchangeStage> stages;
  stages.push_back(ExchangeStage{[=](std::vector<Message>& sends, std::vector<Message>& receives) {
                                   if (g->me == root) {
                                     for (int r : root_column) {
                                       if (r != root) sends.push_back({r, data});
                                     }
                                   } else if (node_source == g->me) {
                                     receives.push_back({root, data});
                                   }
                                 },
                                 {}});
  stages.push_back(ExchangeStage{[=](std::vector<Message>& sends, std::vector<Message>& receives) {
                                   if (g->me == node_source) {
                                     for (int r : g->node) {
                                       if (r != g->me) sends.push_back({r, data});
                                     }
                                   } else {
                                     receives.push_back({node_source, data});
                                   }
                                 },
                                 {}});
  return start("broadcast", options, std::move(stages), {tensor});
}

std::shared_ptr<Work> HierarchicalCommunicator::all_to_all(const at::Tensor& input, const at::Tensor& output,
                                                           const CollectiveOptions& options) {
  flat_->validate(
      CollectiveOp::kAllToAll,
      [&] {
        check_pair(CollectiveOp::kAllToAll, input, output, 1, 1, true, rank());
        if (input.numel() % size() != 0) {
          throw Error(fmt::format("all_to_all: input {} does not split into {} equal chunks", describe(input), size()),
                      "all_to_all", rank());
        }
      },
      &input, input.numel(), 0);
  const at::Tensor send = overlaps(input, output) ? input.view({size(), -1}).clone() : input.view({size(), -1});
  const at::Tensor receive = output.view({size(), -1});
  std::vector<ExchangeStage> stages;
  stages.push_back(ExchangeStage{[=, me = rank(), n = size()](std::vector<Message>& sends,
                                                               std::vector<Message>& receives) {
                                   for (int r = 0; r < n; ++r) {
                                     if (r == me) continue;
                                     sends.push_back({r, row(send, r)});
                                     receives.push_back({r, row(receive, r)});
                                   }
                                 },
                                 [=, me = rank()]() mutable { row(receive, me).copy_(row(send, me)); }});
  return start("all_to_all", options, std::move(stages), {input, output, send});
}

std::shared_ptr<Work> HierarchicalCommunicator::all_to_all_v(const at::Tensor& input,
                                                             const std::vector<int64_t>& send_counts,
                                                             const at::Tensor& output,
                                                             const std::vector<int64_t>& receive_counts,
                                                             const CollectiveOptions& options) {
  // Straight to each peer, as all_to_all: what crosses nodes is exactly the elements sent there.
  flat_->validate(
      CollectiveOp::kAllToAll, [&] { check_all_to_all_v(*this, input, send_counts, output, receive_counts); }, &input,
      0, 1);
  const at::Tensor send = overlaps(input, output) ? input.clone() : input;
  std::vector<int64_t> send_offsets, receive_offsets;
  for (int64_t r = 0, s = 0, t = 0; r < size(); ++r) {
    send_offsets.push_back(s);
    receive_offsets.push_back(t);
    s += send_counts[static_cast<size_t>(r)];
    t += receive_counts[static_cast<size_t>(r)];
  }
  std::vector<ExchangeStage> stages;
  stages.push_back(ExchangeStage{
      [=, me = rank(), n = size()](std::vector<Message>& sends, std::vector<Message>& receives) {
        for (int r = 0; r < n; ++r) {
          if (r == me) continue;
          const size_t k = static_cast<size_t>(r);
          if (send_counts[k] > 0) sends.push_back({r, send.narrow(0, send_offsets[k], send_counts[k])});
          if (receive_counts[k] > 0) receives.push_back({r, output.narrow(0, receive_offsets[k], receive_counts[k])});
        }
      },
      [=, me = static_cast<size_t>(rank())]() mutable {
        output.narrow(0, receive_offsets[me], receive_counts[me]).copy_(send.narrow(0, send_offsets[me], send_counts[me]));
      }});
  return start("all_to_all_v", options, std::move(stages), {input, output, send});
}

std::shared_ptr<Work> HierarchicalCommunicator::barrier(const CollectiveOptions& options) {
  auto work = flat_->barrier({.async = true});
  if (options.async) return work;
  BlockedScope blocked("barrier");
  while (!work->test()) {  // keeping this rank's exchanges moving (see ExchangeProgress)
    progress_->poll();
    std::this_thread::yield();
  }
  return work;
}

std::unique_ptr<Communicator> HierarchicalCommunicator::split(int color, int key) {
  auto child = flat_->split(color, key);
  // A rank waiting in the child (an hpZ group's gather) keeps this world's exchanges moving.
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(child.get()))
    mpi->set_progress_while_waiting([progress = progress_] { progress->poll(); });
  return child;
}

}  // namespace zero::comm_detail
