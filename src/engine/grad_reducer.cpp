#include "engine/grad_reducer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "engine/in_bucket_gradients.h"
#include "engine/streamed_gradients.h"
#include "zero/error.h"

namespace zero::engine {
namespace {

// Fires after AccumulateGrad has written a parameter's gradient (a tensor hook on the leaf would
// fire before accumulation: the wrong moment).
class GradientReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradientReadyHook(GradReducer* reducer, int param) : reducer_(reducer), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    reducer_->on_gradient(param_);
    return outputs;
  }

 private:
  GradReducer* reducer_;
  int param_;
};

}  // namespace

GradReducer::GradReducer(FlatParams& flat, Communicator& comm, const ReducerOptions& options, GradientHome home)
    : flat_(flat),
      comm_(comm),
      options_(options),
      launcher_(flat.layout(), [this](int b) { return strategy_->launch(b); }) {
  if (options.gradients == ReducerOptions::Gradients::kStreamedIntoShards) {
    if (options.whole_buckets) throw Error("streamed gradients are reduced into shards, never into whole buckets");
    strategy_ = std::make_unique<StreamedGradients>(flat, comm, options, launcher_, std::move(home));
  } else {
    strategy_ = std::make_unique<InBucketGradients>(flat, comm, options);
  }
  for (size_t i = 0; i < flat_.params().size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(flat_.params()[i]);
    hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<GradientReadyHook>(this, static_cast<int>(i))));
    accumulators_.push_back(std::move(accumulator));
  }
}

GradReducer::~GradReducer() {
  launcher_.drain(true);  // the reductions' finishers use the strategy: before it goes
  // The model may outlive the engine: its gradient accumulators must not call a dead reducer.
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
}

void GradReducer::begin_backward(bool reduce) {
  reducing_ = reduce;
  launcher_.begin();
  strategy_->begin_backward(reduce);
}

void GradReducer::on_gradient(int param) {
  if (!reducing_) return;
  strategy_->on_gradient(param);
  const int b = flat_.layout().slot(param).bucket;
  if (launcher_.arrive(b) && on_bucket_complete) on_bucket_complete(b);
  // A complete bucket is reduced now: during backward, asynchronously with overlap_comm (drain
  // then only polls: MPI progresses non-blocking collectives inside MPI calls), else blocking.
  launcher_.launch_ready();
  launcher_.drain(!options_.overlap);
}

void GradReducer::end_backward() {
  if (!reducing_) return;
  for (size_t i = 0; i < flat_.layout().buckets().size(); ++i) {
    const int b = static_cast<int>(i);
    if (launcher_.complete(b)) continue;  // launched already; it may have given its buffer back
    // Parameters that got no gradient this micro-step contribute zeros.
    strategy_->fill_missing(b);
    launcher_.mark_complete(b);
    if (on_bucket_complete) on_bucket_complete(b);
  }
  launcher_.launch_ready();
  launcher_.drain(true);
  reducing_ = false;
  strategy_->end_backward();
}

double GradReducer::averaging_factor() const {
  const double ranks = comm_.size();
  return options_.prescale ? options_.predivide_factor / ranks : 1.0 / ranks;
}

}  // namespace zero::engine
