// zero::checkpointing::checkpoint (include/zero/activation_checkpoint.h): a custom autograd node that runs the
// forward again in backward.
#include "zero/activation_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>

#include "engine/contiguous_activations.h"
#include "zero/communicator.h"
#include "zero/error.h"
#include "zero/tensor_parallel.h"

namespace zero::checkpointing {
namespace {

std::atomic<int64_t> forwards{0}, recomputations{0};
thread_local int recomputing_depth = 0;

std::atomic<bool> profiling{false};
std::mutex profile_mutex;
std::vector<CheckpointProfile> profiles;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Adds to `name`'s entry (created on first use).
void add_profile(const std::string& name, double forward, double recompute, double backward, int64_t calls) {
  std::lock_guard<std::mutex> lock(profile_mutex);
  auto it = std::find_if(profiles.begin(), profiles.end(), [&](const CheckpointProfile& p) { return p.name == name; });
  if (it == profiles.end()) it = profiles.insert(profiles.end(), CheckpointProfile{.name = name});
  it->calls += calls;
  it->forward_seconds += forward;
  it->recompute_seconds += recompute;
  it->backward_seconds += backward;
}

uint64_t hash_of(const at::Tensor& t) {
  if (!t.defined()) return 0;
  const at::Tensor c = t.to(at::kCPU).contiguous();  // (a GPU tensor: its bytes come down first)
  return XXH3_64bits(c.data_ptr(), c.nbytes());
}

at::Tensor cpu_random_state() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_cpu_random_state(const at::Tensor& state) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// An input kept as this member's piece of it (partition_activations: piece_of), and its shape.
struct Piece {
  at::Tensor mine;
  std::vector<int64_t> shape;
};

class CheckpointBackward : public torch::autograd::Node {
 public:
  std::string name() const override { return "zero::CheckpointBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    for (size_t i = 0; i < pieces.size(); ++i) {
      // (Every member gathers, in the same order: their backwards run alike.)
      if (pieces[i].mine.defined()) inputs[i] = whole_from_pieces(pieces[i].mine, pieces[i].shape, *partition);
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (pieces[i].mine.defined() || slots[i]) continue;  // a copy: the input's later changes do not reach it
      if (inputs[i].defined() && inputs[i]._version() != versions[i]) {
        throw Error("activation checkpoint \"" + label + "\": input " + std::to_string(i) +
                        " was changed in place after the forward; the recomputation would see other values",
                    label);
      }
    }
    std::vector<at::Tensor> again;
    for (size_t i = 0; i < inputs.size(); ++i) {
      at::Tensor t = inputs[i].defined() ? inputs[i].detach() : at::Tensor();
      if (t.defined() && needs_grad[i]) t.requires_grad_(true);
      again.push_back(t);
    }
    std::vector<at::Tensor> outputs;
    const auto recompute_start = std::chrono::steady_clock::now();
    {
      // The random state the first run saw, then the one backward had (dropout elsewhere in
      // backward, or the next step, must not notice).
      const at::Tensor before = cpu_random_state();
      set_cpu_random_state(rng_state);
      struct Restore {
        const at::Tensor& state;
        ~Restore() { set_cpu_random_state(state); }
      } restore{before};
      at::AutoGradMode grad(true);
      ++recomputing_depth;
      struct Depth {
        ~Depth() { --recomputing_depth; }
      } depth;
      outputs = fn(again);
    }
    ++recomputations;
    const double recompute_seconds = seconds_since(recompute_start);
    if (outputs.size() != hashes.size()) {
      throw Error("activation checkpoint \"" + label + "\": the recomputation returned " +
                      std::to_string(outputs.size()) + " outputs, the forward " + std::to_string(hashes.size()),
                  label);
    }
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (hash_of(outputs[k]) != hashes[k]) {
        throw Error("activation checkpoint \"" + label + "\": output " + std::to_string(k) +
                        " of the recomputation differs from the forward's (the block's forward depends on state that "
                        "changed in between: a random generator other than the CPU default, a module flag, its inputs)",
                    label);
      }
    }
    // Back through the recomputed graph: the block's parameters get their gradients here.
    std::vector<at::Tensor> roots, root_grads;
    for (size_t j = 0; j < attached.size(); ++j) {
      const at::Tensor& out = outputs[attached[j]];
      if (j < grads.size() && grads[j].defined() && out.requires_grad()) {
        roots.push_back(out);
        root_grads.push_back(grads[j]);
      }
    }
    const auto backward_start = std::chrono::steady_clock::now();
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    if (profiling) add_profile(label, 0, recompute_seconds, seconds_since(backward_start), 0);
    torch::autograd::variable_list result;
    for (size_t i = 0; i < again.size(); ++i)
      result.push_back(again[i].defined() && needs_grad[i] ? again[i].grad() : at::Tensor());
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i].mine.defined()) inputs[i] = at::Tensor();  // the whole again only while recomputing
    }
    // The backward through the block is done: what was kept goes (a contiguous buffer's slots are free).
    inputs.clear();
    pieces.clear();
    slots.clear();
    return result;
  }

  CheckpointFunction fn;
  std::string label;
  std::vector<at::Tensor> inputs;  // detached: only their values are kept (undefined while partitioned)
  std::vector<Piece> pieces;       // per input: this member's piece when partitioned, else empty
  std::vector<std::shared_ptr<void>> slots;  // per input: its contiguous buffer slot, when it is in one
  Communicator* partition = nullptr;
  std::vector<bool> needs_grad;
  std::vector<uint32_t> versions;
  at::Tensor rng_state;
  std::vector<uint64_t> hashes;  // per output of the first run
  std::vector<size_t> attached;  // outputs that got this node as grad_fn, in input_nr order
};

}  // namespace

namespace detail {
bool recomputing() { return recomputing_depth > 0; }
}  // namespace detail

std::vector<at::Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<at::Tensor>& inputs,
                                   const std::string& name, Communicator* partition_over) {
  if (!at::GradMode::is_enabled()) return fn(inputs);  // nothing to save for
  auto node = std::shared_ptr<CheckpointBackward>(new CheckpointBackward(), torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  node->fn = fn;
  node->label = name;
  node->rng_state = cpu_random_state();
  std::vector<at::Tensor> detached;
  for (const at::Tensor& t : inputs) {
    detached.push_back(t.defined() ? t.detach() : at::Tensor());
    node->needs_grad.push_back(t.defined() && t.requires_grad());
    node->versions.push_back(t.defined() ? t._version() : 0);
  }
  std::vector<at::Tensor> outputs;
  const auto start = std::chrono::steady_clock::now();
  {
    at::NoGradGuard no_grad;
    outputs = fn(detached);
  }
  // Kept whole, or as this member's piece (after the run: the outputs may alias the inputs).
  const bool partitioned = partition_over != nullptr && partition_over->size() > 1;
  node->partition = partition_over;
  for (const at::Tensor& t : detached) {
    const bool floating = t.defined() && at::isFloatingType(t.scalar_type());
    const bool cut_it = partitioned && floating;
    at::Tensor kept = cut_it ? piece_of(t, *partition_over) : t;
    std::shared_ptr<void> slot;
    if (floating && contiguous_enabled()) std::tie(kept, slot) = contiguous_activations().keep(kept);
    node->pieces.push_back(cut_it ? Piece{kept, t.sizes().vec()} : Piece{});
    node->inputs.push_back(cut_it ? at::Tensor() : kept);
    node->slots.push_back(std::move(slot));
  }
  ++forwards;
  if (profiling) add_profile(name, seconds_since(start), 0, 0, 1);
  for (size_t k = 0; k < outputs.size(); ++k) {
    node->hashes.push_back(hash_of(outputs[k]));
    if (outputs[k].defined() && at::isFloatingType(outputs[k].scalar_type())) {
      // A tensor of its own (an output may alias an input), then this node as its grad_fn.
      bool aliased = outputs[k].is_view();
      for (const at::Tensor& in : detached) aliased = aliased || (in.defined() && in.is_same(outputs[k]));
      if (aliased) outputs[k] = outputs[k].clone();
      torch::autograd::set_history(outputs[k], node);
      node->attached.push_back(k);
    }
  }
  return outputs;
}

at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& input,
                      const std::string& name, Communicator* partition_over) {
  return checkpoint([fn](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{fn(in[0])}; }, {input},
                    name, partition_over)[0];
}

void set_profiling(bool on) { profiling = on; }

std::vector<CheckpointProfile> profile() {
  std::lock_guard<std::mutex> lock(profile_mutex);
  return profiles;
}

void reset_profile() {
  std::lock_guard<std::mutex> lock(profile_mutex);
  profiles.clear();
}

CheckpointCounts counts() { return {forwards.load(), recomputations.load()}; }

}  // namespace zero::checkpointing
