#include "models/finetune/trainer_config.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "models/common/trainer_adamw.h"
#include "zero/error.h"

namespace zero::finetune {
namespace {

// The DeepSpeed document; key order does not matter here (a distinct name: unity batches put this file
// beside chat_example.cpp, whose json is the ordered one).
using ConfigJson = nlohmann::json;

// Reconciles one flag with the config value at `pointer` (a JSON pointer).
class Reconciler {
 public:
  Reconciler(ConfigJson document, const TrainingArguments& given) : document_(std::move(document)), given_(given) {}

  template <class T>
  void key(const char* pointer, const char* flag, T& value) {
    const ConfigJson::json_pointer at(pointer);
    if (!document_.contains(at)) return;
    const ConfigJson& v = document_.at(at);
    if (v.is_string() && v.get<std::string>() == "auto") return;
    T from_config;
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) return;  // the config reader reports the bad type
      from_config = v.get<bool>();
    } else {
      if (!v.is_number()) return;
      from_config = static_cast<T>(v.get<double>());
    }
    const std::string path = std::string(pointer).substr(1);
    if (from_config == value) return;
    if (given_.given.count(flag)) {
      mismatches_.push_back(fmt::format("{} is {} in the config, --{} {}", dotted(path), v.dump(), flag, text(value)));
    } else {
      notes_.push_back(fmt::format("{} = {} from the config (--{} not given; its default is {})", dotted(path), v.dump(),
                                   flag, text(value)));
      value = from_config;
    }
  }

  void finish(std::vector<std::string>& notes) const {
    if (!mismatches_.empty()) {
      throw Error(fmt::format("the DeepSpeed config and the Trainer's flags disagree (as transformers' DeepSpeed "
                              "integration refuses): {}; set these keys to \"auto\" or give matching flags",
                              fmt::join(mismatches_, "; ")),
                  "--deepspeed");
    }
    notes.insert(notes.end(), notes_.begin(), notes_.end());
  }

 private:
  static std::string dotted(std::string path) {
    std::replace(path.begin(), path.end(), '/', '.');
    return path;
  }
  template <class T>
  static std::string text(T value) {
    if constexpr (std::is_same_v<T, bool>) return value ? "true" : "false";
    else return fmt::format("{}", value);
  }
  ConfigJson document_;
  const TrainingArguments& given_;
  std::vector<std::string> mismatches_, notes_;
};

}  // namespace

TrainingArguments reconcile_with_config(const TrainingArguments& args, std::vector<std::string>& notes) {
  TrainingArguments out = args;
  Reconciler r(ConfigJson::parse(Config::document_as_json(args.deepspeed)), args);
  r.key("/train_micro_batch_size_per_gpu", "per_device_train_batch_size", out.per_device_train_batch_size);
  r.key("/gradient_accumulation_steps", "gradient_accumulation_steps", out.gradient_accumulation_steps);
  r.key("/gradient_clipping", "max_grad_norm", out.max_grad_norm);
  r.key("/bf16/enabled", "bf16", out.bf16);
  r.key("/bfloat16/enabled", "bf16", out.bf16);
  r.key("/fp16/enabled", "fp16", out.fp16);
  r.key("/optimizer/params/lr", "learning_rate", out.learning_rate);
  r.key("/optimizer/params/weight_decay", "weight_decay", out.weight_decay);
  r.key("/optimizer/params/eps", "adam_epsilon", out.adam_epsilon);
  r.key("/optimizer/params/betas/0", "adam_beta1", out.adam_beta1);
  r.key("/optimizer/params/betas/1", "adam_beta2", out.adam_beta2);
  r.finish(notes);
  return out;
}

int64_t trainer_warmup_steps(const TrainingArguments& args, int64_t max_steps) {
  if (args.warmup_steps > 0) return args.warmup_steps;
  return static_cast<int64_t>(std::ceil(args.warmup_ratio * static_cast<double>(max_steps)));
}

Config trainer_config(const TrainingArguments& args, int world_size, int64_t hidden_size, int64_t max_steps,
                      int64_t warmup_steps, std::vector<std::string>& notes, bool& trainer_optimizer) {
  AutoContext context;
  context.world_size = world_size;
  context.hidden_size = hidden_size;
  context.micro_batch_size = args.per_device_train_batch_size;
  context.gradient_accumulation_steps = args.gradient_accumulation_steps;
  context.learning_rate = args.learning_rate;
  context.weight_decay = args.weight_decay;
  context.adam_beta1 = args.adam_beta1;
  context.adam_beta2 = args.adam_beta2;
  context.adam_epsilon = args.adam_epsilon;
  context.max_grad_norm = args.max_grad_norm;
  context.warmup_steps = warmup_steps;
  context.max_steps = max_steps;
  context.bf16 = args.bf16;
  context.fp16 = args.fp16;
  Config config = Config::parse_file(args.deepspeed);
  config.resolve(context);
  trainer_optimizer = config.optimizer.type == OptimizerType::kNone;
  if (trainer_optimizer) {
    // The Trainer builds its own AdamW (torch.optim.AdamW, betas and eps from its flags).
    config.optimizer = models::trainer_adamw(context);
    const OptimizerConfig& a = config.optimizer;
    notes.push_back(fmt::format("no optimizer in the config: the Trainer's AdamW (lr {}, betas ({}, {}), eps {}, "
                                "weight decay {} except on biases and norms)",
                                a.lr, a.beta1, a.beta2, a.eps, a.weight_decay));
  }
  if (config.scheduler.type == SchedulerType::kNone) {
    static const std::vector<std::pair<std::string, SchedulerType>> kTypes = {
        {"linear", SchedulerType::kTrainerLinear},
        {"cosine", SchedulerType::kTrainerCosine},
        {"constant", SchedulerType::kTrainerConstant},
        {"constant_with_warmup", SchedulerType::kTrainerConstantWithWarmup}};
    const auto it = std::find_if(kTypes.begin(), kTypes.end(), [&](const auto& t) { return t.first == args.lr_scheduler_type; });
    if (it == kTypes.end()) {
      throw Error("--lr_scheduler_type " + args.lr_scheduler_type +
                      " is not built (linear, cosine, constant, constant_with_warmup are)",
                  "--lr_scheduler_type");
    }
    config.scheduler.type = it->second;
    config.scheduler.warmup_num_steps = warmup_steps;
    config.scheduler.total_num_steps = max_steps;
    notes.push_back(fmt::format("no scheduler in the config: the Trainer's {} schedule ({} warmup steps of {})",
                                args.lr_scheduler_type, warmup_steps, max_steps));
  } else if (args.given.count("lr_scheduler_type")) {
    notes.push_back("the config's scheduler block is used; --lr_scheduler_type is not (as with the Trainer)");
  }
  return config;
}

}  // namespace zero::finetune
