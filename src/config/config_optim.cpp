#include "config/config_sections.h"

namespace zero::config_detail {
namespace {

struct OptimizerName {
  const char* name;
  OptimizerType type;
};
// DeepSpeed's spellings, matched case-insensitively.
const std::vector<OptimizerName> kOptimizers = {{"Adam", OptimizerType::kAdam},
                                                {"AdamW", OptimizerType::kAdamW},
                                                {"DeepSpeedCPUAdam", OptimizerType::kCpuAdam},
                                                {"Adagrad", OptimizerType::kAdagrad},
                                                {"Lamb", OptimizerType::kLamb},
                                                {"Lion", OptimizerType::kLion},
                                                {"SGD", OptimizerType::kSgd}};
// DeepSpeed's optimizers zerocpp does not have, with what to call them in the refusal.
struct MissingOptimizer {
  const char* name;
  const char* what;
};
const std::vector<MissingOptimizer> kMissing = {
    {"OneBitAdam", "1-bit Adam"},   {"ZeroOneAdam", "0/1 Adam"},    {"OneBitLamb", "1-bit LAMB"},
    {"MuAdam", "muP Adam"},         {"MuAdamW", "muP AdamW"},       {"MuSGD", "muP SGD"},
    {"RMSprop", "torch's RMSprop"}, {"Adamax", "torch's Adamax"},   {"Adadelta", "torch's Adadelta"},
    {"ASGD", "torch's ASGD"},       {"NAdam", "torch's NAdam"},     {"RAdam", "torch's RAdam"},
    {"Rprop", "torch's Rprop"},     {"LBFGS", "torch's LBFGS"},     {"SparseAdam", "torch's SparseAdam"}};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// betas: [b1, b2] or "auto".
void read_betas(ObjectReader& params, OptimizerConfig& o, Diagnostics& diag, double default_beta2) {
  const nlohmann::json* v = params.raw("betas");
  std::string path = params.path_of("betas");
  o.beta2 = default_beta2;
  if (!v) {
    diag.record(path, {o.beta1, o.beta2}, ValueSource::kDefault);
    return;
  }
  if (v->is_string() && *v == "auto") {
    diag.autos.push_back(path);
    diag.record(path, "auto", ValueSource::kAuto);
    return;
  }
  if (!v->is_array() || v->size() != 2 || !(*v)[0].is_number() || !(*v)[1].is_number()) {
    diag.problem(path, "expected [beta1, beta2] with two numbers in [0, 1), got " + v->dump());
    return;
  }
  for (int i = 0; i < 2; ++i) {
    double b = (*v)[i].get<double>();
    if (b < 0 || b >= 1)
      diag.problem(path + "[" + std::to_string(i) + "]", "expected a number in [0, 1), got " + (*v)[i].dump());
  }
  o.beta1 = (*v)[0].get<double>();
  o.beta2 = (*v)[1].get<double>();
  diag.record(path, *v, ValueSource::kFile);
}

}  // namespace

void read_optimizer(ObjectReader& root, OptimizerConfig& o, Diagnostics& diag) {
  // DeepSpeed reads type, params and legacy_fusion and ignores the rest of the block; params
  // go to the optimizer's constructor as keyword arguments, which refuse unknown ones.
  ObjectReader block = root.child("optimizer", UnknownKeys::kIgnore);
  block.get_bool("legacy_fusion", false);
  if (!block.present()) {
    block.finish();
    return;
  }
  const nlohmann::json* type = block.raw("type");
  if (!type || !type->is_string()) {
    diag.problem(block.path_of("type"), type ? "expected an optimizer name string, got " + type->dump()
                                             : "missing: the optimizer block needs a type (e.g. \"AdamW\")");
    block.accept({"params"});
    block.finish();
    return;
  }
  o.type_name = type->get<std::string>();
  std::vector<std::string> names;
  for (const auto& n : kOptimizers) {
    names.push_back(n.name);
    if (lower(n.name) == lower(o.type_name)) o.type = n.type;
  }
  ObjectReader params = block.child("params");
  block.finish();
  if (o.type == OptimizerType::kNone) {
    for (const auto& m : kMissing) {
      if (lower(m.name) == lower(o.type_name)) {
        diag.problem(block.path_of("type"), std::string(m.what) + " is not supported by zerocpp");
        return;
      }
    }
    std::string hint = closest_match(o.type_name, names);
    diag.problem(block.path_of("type"), "not an optimizer DeepSpeed knows: \"" + o.type_name + "\"" +
                                            (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)"));
    return;
  }
  diag.record(block.path_of("type"), o.type_name, ValueSource::kFile);

  if (params.has("max_grad_norm")) {
    diag.problem(params.path_of("max_grad_norm"),
                 "not allowed in optimizer params: use the top-level \"gradient_clipping\"");
    params.accept({"max_grad_norm"});
  }
  bool is_auto = false;
  double default_lr = o.type == OptimizerType::kAdagrad ? 1e-2 : o.type == OptimizerType::kLion ? 1e-4 : 1e-3;
  o.lr = params.get_double_or_auto("lr", default_lr, 0, 1e308, &is_auto);
  o.weight_decay = params.get_double_or_auto("weight_decay", 0, 0, 1e308, &is_auto);
  switch (o.type) {
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW:
    case OptimizerType::kCpuAdam:
    case OptimizerType::kLamb:
      read_betas(params, o, diag, 0.999);
      o.eps = params.get_double_or_auto("eps", 1e-8, 0, 1e308, &is_auto);
      o.bias_correction = params.get_bool("bias_correction", true);
      if (o.type == OptimizerType::kLamb) {
        o.max_coeff = params.get_double("max_coeff", 10.0, 0);
        o.min_coeff = params.get_double("min_coeff", 0.01, 0);
      } else {
        o.adam_w_mode = params.get_bool("adam_w_mode", true);
        o.torch_adam = params.get_bool("torch_adam", false);
        params.require_default("amsgrad", false);  // DeepSpeed's FusedAdam refuses it too
      }
      break;
    case OptimizerType::kAdagrad:
      o.eps = params.get_double_or_auto("eps", 1e-10, 0, 1e308, &is_auto);
      break;
    case OptimizerType::kLion:
      o.beta1 = 0.9;
      read_betas(params, o, diag, 0.99);
      break;
    case OptimizerType::kSgd:
      o.momentum = params.get_double("momentum", 0, 0);
      o.dampening = params.get_double("dampening", 0, 0);
      o.nesterov = params.get_bool("nesterov", false);
      break;
    case OptimizerType::kNone:
      break;
  }
  params.finish();
}

void read_scheduler(ObjectReader& root, SchedulerConfig& s, Diagnostics& diag) {
  ObjectReader block = root.child("scheduler", UnknownKeys::kIgnore);  // params: constructor arguments
  if (!block.present()) {
    block.finish();
    return;
  }
  static const std::vector<std::string> kTypes = {"none",           "WarmupLR", "WarmupDecayLR",
                                                  "WarmupCosineLR", "OneCycle", "LRRangeTest"};
  if (!block.has("type"))
    diag.problem(block.path_of("type"), "missing: the scheduler block needs a type (e.g. \"WarmupLR\")");
  s.type = static_cast<SchedulerType>(block.get_choice("type", 0, kTypes));
  ObjectReader p = block.child("params");
  block.finish();
  bool is_auto = false;
  auto required_steps = [&](const char* key) {
    if (!p.has(key)) diag.problem(p.path_of(key), std::string("required by ") + kTypes[static_cast<size_t>(s.type)]);
    return p.get_int_or_auto(key, 0, 1, &is_auto);
  };
  static const std::vector<std::string> kWarmupTypes = {"log", "linear"};
  p.require_default("last_batch_iteration", -1);
  switch (s.type) {
    case SchedulerType::kWarmupDecayLR:
      s.total_num_steps = required_steps("total_num_steps");
      [[fallthrough]];
    case SchedulerType::kWarmupLR:
      s.warmup_min_lr = p.get_double_or_auto("warmup_min_lr", 0, 0, 1e308, &is_auto);
      s.warmup_max_lr = p.get_double_or_auto("warmup_max_lr", 1e-3, 0, 1e308, &is_auto);
      s.warmup_num_steps = p.get_int_or_auto("warmup_num_steps", 1000, 0, &is_auto);
      s.warmup_type = kWarmupTypes[p.get_choice("warmup_type", 0, kWarmupTypes)];
      break;
    case SchedulerType::kWarmupCosineLR:
      s.total_num_steps = required_steps("total_num_steps");
      s.warmup_min_ratio = p.get_double("warmup_min_ratio", 0, 0, 1);
      s.warmup_num_steps = p.get_int_or_auto("warmup_num_steps", 1000, 0, &is_auto);
      s.cos_min_ratio = p.get_double("cos_min_ratio", 1e-4, 0, 1);
      s.warmup_type = kWarmupTypes[p.get_choice("warmup_type", 0, kWarmupTypes)];
      break;
    case SchedulerType::kOneCycle:
      for (const char* key : {"cycle_min_lr", "cycle_max_lr"}) {
        if (!p.has(key)) diag.problem(p.path_of(key), "required by OneCycle");
      }
      s.cycle_min_lr = p.get_double("cycle_min_lr", 0, 0);
      s.cycle_max_lr = p.get_double("cycle_max_lr", 0, 0);
      s.decay_lr_rate = p.get_double("decay_lr_rate", 0, 0);
      s.cycle_first_step_size = p.get_int("cycle_first_step_size", 2000, 1);
      s.cycle_second_step_size = p.get_int("cycle_second_step_size", s.cycle_first_step_size, 1);
      s.cycle_first_stair_count = p.get_int("cycle_first_stair_count", 0, 0);
      s.cycle_second_stair_count = p.get_int("cycle_second_stair_count", s.cycle_first_stair_count, 0);
      s.decay_step_size = p.get_int("decay_step_size", 0, 0);
      s.cycle_momentum = p.get_bool("cycle_momentum", true);
      s.cycle_min_mom = p.get_double("cycle_min_mom", 0.8, 0, 1);
      s.cycle_max_mom = p.get_double("cycle_max_mom", 0.9, 0, 1);
      s.decay_mom_rate = p.get_double("decay_mom_rate", 0, 0);
      break;
    case SchedulerType::kLRRangeTest:
      s.lr_range_test_min_lr = p.get_double("lr_range_test_min_lr", 1e-3, 0);
      s.lr_range_test_step_size = p.get_int("lr_range_test_step_size", 2000, 1);
      s.lr_range_test_step_rate = p.get_double("lr_range_test_step_rate", 1.0, 0);
      s.lr_range_test_staircase = p.get_bool("lr_range_test_staircase", false);
      break;
    case SchedulerType::kNone:
    case SchedulerType::kTrainerLinear:
    case SchedulerType::kTrainerCosine:
    case SchedulerType::kTrainerConstant:
    case SchedulerType::kTrainerConstantWithWarmup:
      break;
  }
  p.finish();
}

}  // namespace zero::config_detail
