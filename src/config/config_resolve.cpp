// Config::resolve — the batch triad and every "auto" value.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "config/config_sections.h"
#include "zero/error.h"

namespace zero {
namespace {

using config_detail::Diagnostics;

// The triad as DeepSpeed resolves it: any two of the three determine the third.
void resolve_triad(Config& c, int64_t tbs, int64_t micro, int64_t gas, int world, bool micro_auto, Diagnostics& diag) {
  auto split = [&](int64_t total, int64_t divisor, const char* what) -> int64_t {
    if (total % divisor != 0) {
      diag.problem("train_batch_size", std::to_string(total) + " is not divisible by " + what + " = " +
                                           std::to_string(divisor) + " (world size " + std::to_string(world) + ")");
      return 0;
    }
    return total / divisor;
  };
  if (tbs && micro && gas) {
    if (tbs != micro * gas * world) {
      diag.problem("train_batch_size", std::to_string(tbs) + " != train_micro_batch_size_per_gpu " +
                                           std::to_string(micro) + " * gradient_accumulation_steps " +
                                           std::to_string(gas) + " * world size " + std::to_string(world) + " = " +
                                           std::to_string(micro * gas * world));
    }
  } else if (tbs && micro) {
    gas = split(tbs, micro * world, "train_micro_batch_size_per_gpu * world size");
  } else if (tbs && gas) {
    micro = split(tbs, gas * world, "gradient_accumulation_steps * world size");
  } else if (micro && gas) {
    tbs = micro * gas * world;
  } else if (tbs) {
    gas = 1;
    micro = split(tbs, world, "world size");
  } else if (micro) {
    gas = 1;
    tbs = micro * world;
  } else {
    diag.problem(micro_auto ? "train_micro_batch_size_per_gpu" : "train_batch_size",
                 micro_auto ? "\"auto\" cannot be resolved: it needs the trainer's micro batch size (zero-train "
                              "--micro-batch)"
                            : "either train_batch_size or train_micro_batch_size_per_gpu must be given");
  }
  // Values the triad computed (rather than read) are marked "auto".
  if (tbs != c.train_batch_size) diag.record("train_batch_size", tbs, ValueSource::kAuto);
  if (micro != c.train_micro_batch_size_per_gpu)
    diag.record("train_micro_batch_size_per_gpu", micro, ValueSource::kAuto);
  if (gas != c.gradient_accumulation_steps) diag.record("gradient_accumulation_steps", gas, ValueSource::kAuto);
  c.train_batch_size = tbs;
  c.train_micro_batch_size_per_gpu = micro;
  c.gradient_accumulation_steps = gas;
}

}  // namespace

void Config::resolve(const AutoContext& ctx) {
  Diagnostics diag;
  diag.values = values_;
  if (ctx.world_size < 1) {
    throw ConfigError(origin_, {"world size: expected >= 1, got " + std::to_string(ctx.world_size)});
  }
  int64_t tbs = given_train_batch_size_, micro = given_micro_batch_, gas = given_accumulation_;
  // Before the triad runs these hold what the file gave (0 = absent), so it can tell computed values.
  train_batch_size = tbs;
  train_micro_batch_size_per_gpu = micro;
  gradient_accumulation_steps = gas;
  std::vector<std::string> unresolved;
  const int64_t h = ctx.hidden_size.value_or(0);
  // Each "auto" key: how it resolves, and what it needs when it cannot.
  using Resolver = std::function<bool(const std::string& path)>;
  auto set = [&](auto& field, const auto& value, const std::string& path) {
    field = value;
    diag.record(path, value, ValueSource::kAuto);
    return true;
  };
  auto from = [&](auto& field, const auto& optional) -> Resolver {
    return
        [&field, &optional, &set](const std::string& path) { return optional ? set(field, *optional, path) : false; };
  };
  // The stage-3 sizes, under either spelling of their keys.
  const std::pair<Resolver, std::string> prefetch_rule = {
      [&](const std::string& p) {
        return h > 0 &&
               set(zero.stage3_prefetch_bucket_size, static_cast<int64_t>(std::floor(0.9 * double(h) * double(h))), p);
      },
      "the model's hidden size"};
  const std::pair<Resolver, std::string> persistence_rule = {
      [&](const std::string& p) { return h > 0 && set(zero.stage3_param_persistence_threshold, 10 * h, p); },
      "the model's hidden size"};
  const std::map<std::string, std::pair<Resolver, std::string>> resolvers = {
      {"train_batch_size", {[](const std::string&) { return true; }, ""}},  // computed by the triad
      {"train_micro_batch_size_per_gpu", {from(micro, ctx.micro_batch_size), ""}},
      {"gradient_accumulation_steps", {from(gas, ctx.gradient_accumulation_steps), ""}},
      {"gradient_clipping", {from(gradient_clipping, ctx.max_grad_norm), "the trainer's max_grad_norm"}},
      {"zero_optimization.reduce_bucket_size",
       {[&](const std::string& p) { return h > 0 && set(zero.reduce_bucket_size, h * h, p); },
        "the model's hidden size"}},
      {"zero_optimization.stage3_prefetch_bucket_size", prefetch_rule},
      {"zero_optimization.prefetch_bucket_size", prefetch_rule},
      {"zero_optimization.stage3_param_persistence_threshold", persistence_rule},
      {"zero_optimization.param_persistence_threshold", persistence_rule},
      {"optimizer.params.lr", {from(optimizer.lr, ctx.learning_rate), "the trainer's learning rate"}},
      {"optimizer.params.eps", {from(optimizer.eps, ctx.adam_epsilon), "the trainer's adam_epsilon"}},
      {"optimizer.params.weight_decay", {from(optimizer.weight_decay, ctx.weight_decay), "the trainer's weight_decay"}},
      {"optimizer.params.betas",
       {[&](const std::string& p) {
          if (!ctx.adam_beta1 || !ctx.adam_beta2) return false;
          optimizer.beta1 = *ctx.adam_beta1;
          optimizer.beta2 = *ctx.adam_beta2;
          diag.record(p, nlohmann::json::array({optimizer.beta1, optimizer.beta2}), ValueSource::kAuto);
          return true;
        },
        "the trainer's adam_beta1 and adam_beta2"}},
      {"scheduler.params.warmup_min_lr",
       {[&](const std::string& p) { return set(scheduler.warmup_min_lr, 0.0, p); }, ""}},
      {"scheduler.params.warmup_max_lr",
       {from(scheduler.warmup_max_lr, ctx.learning_rate), "the trainer's learning rate"}},
      {"scheduler.params.warmup_num_steps",
       {from(scheduler.warmup_num_steps, ctx.warmup_steps), "the trainer's warmup steps"}},
      {"scheduler.params.total_num_steps",
       {from(scheduler.total_num_steps, ctx.max_steps), "the trainer's total steps"}},
      {"fp16.enabled", {[&](const std::string& p) { return set(fp16.enabled, ctx.fp16.value_or(false), p); }, ""}},
      {"bf16.enabled", {[&](const std::string& p) { return set(bf16, ctx.bf16.value_or(false), p); }, ""}},
      {"bfloat16.enabled", {[&](const std::string& p) { return set(bf16, ctx.bf16.value_or(false), p); }, ""}},
  };
  // The trainer's batch flags also fill triad keys the file leaves out (a zero_optimization-only
  // config, say); a value the file gives wins, with a warning when the flag disagrees.
  auto fill = [&](int64_t& value, const std::optional<int64_t>& flag, const char* key) {
    if (!flag) return;
    if (value == 0 && std::find(autos_.begin(), autos_.end(), key) == autos_.end()) {
      value = *flag;
      diag.record(key, value, ValueSource::kAuto);
    } else if (value != 0 && value != *flag) {
      diag.warnings.push_back(std::string(key) + " = " + std::to_string(value) +
                              " from the file overrides the trainer's " + std::to_string(*flag));
    }
  };
  fill(micro, ctx.micro_batch_size, "train_micro_batch_size_per_gpu");
  fill(gas, ctx.gradient_accumulation_steps, "gradient_accumulation_steps");
  for (const auto& path : autos_) {
    auto it = resolvers.find(path);
    if (it != resolvers.end() && it->second.first(path)) continue;
    if (path == "train_micro_batch_size_per_gpu" || path == "gradient_accumulation_steps") continue;  // triad decides
    std::string needs = it == resolvers.end() ? "" : it->second.second;
    std::string why = "\"auto\" cannot be resolved" + (needs.empty() ? std::string() : ": it needs " + needs);
    if (ctx.allow_unresolved) {
      diag.record(path, why, ValueSource::kAuto);
    } else {
      diag.problem(path, why);
    }
    unresolved.push_back(path);
  }
  const bool micro_auto =
      std::find(autos_.begin(), autos_.end(), "train_micro_batch_size_per_gpu") != autos_.end();
  // Tensor and pipeline parallelism: the batch is counted over data-parallel ranks, as DeepSpeed
  // counts it.
  int data_parallel = ctx.world_size;
  if (tensor_parallel.size > 1) {
    if (ctx.world_size % tensor_parallel.size != 0) {
      diag.problem(tensor_parallel.key, std::to_string(tensor_parallel.size) + " does not divide the world size " +
                                            std::to_string(ctx.world_size));
    }
    data_parallel = std::max(1, ctx.world_size / tensor_parallel.size);
  }
  if (pipeline.stages > 1) {
    if (data_parallel % pipeline.stages != 0) {
      diag.problem(pipeline.key, std::to_string(pipeline.stages) + " stages do not divide the world size " +
                                     std::to_string(ctx.world_size) +
                                     (tensor_parallel.size > 1
                                          ? " into " + std::to_string(data_parallel) + " tensor-parallel groups"
                                          : std::string()));
    }
    data_parallel = std::max(1, data_parallel / pipeline.stages);
    // DeepSpeed's pipeline engine asserts the same: stage 2's reductions during backward and
    // stage 3's gathers do not fit its schedule.
    if (zero.stage >= 2) {
      diag.problem("zero_optimization.stage", std::to_string(zero.stage) + " with pipeline parallelism (" +
                                                  pipeline.key + " = " + std::to_string(pipeline.stages) +
                                                  "): the pipeline trains with ZeRO stage 0 or 1, as DeepSpeed's does");
    }
  }
  // Expert parallelism splits each MoE layer's experts over groups of data-parallel ranks.
  if (expert_parallel.enabled && expert_parallel.size > 1 && data_parallel % expert_parallel.size != 0) {
    diag.problem(expert_parallel.key, std::to_string(expert_parallel.size) + " does not divide the " +
                                          std::to_string(data_parallel) + " data-parallel ranks");
  }
  resolve_triad(*this, tbs, micro, gas, data_parallel, micro_auto, diag);
  world_size = data_parallel;
  // DeepSpeed asserts the same when it builds hpZ's groups.
  if (zero.stage == 3 && zero.zero_hpz_partition_size > 1 && world_size % zero.zero_hpz_partition_size != 0) {
    diag.problem("zero_optimization.zero_hpz_partition_size",
                 std::to_string(zero.zero_hpz_partition_size) + " does not divide the world size " +
                     std::to_string(world_size));
  }
  config_detail::check_cross_key_rules(*this, diag);
  values_ = std::move(diag.values);
  warnings_ = parse_warnings_;  // resolve() may run again: its own warnings replace the last ones
  warnings_.insert(warnings_.end(), diag.warnings.begin(), diag.warnings.end());
  unresolved_ = std::move(unresolved);
  resolved_ = diag.problems.empty() && unresolved_.empty();
  if (!diag.problems.empty()) throw ConfigError(origin_, diag.problems);
}

}  // namespace zero
