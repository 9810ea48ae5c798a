#include "zero/config.h"

#include <fstream>
#include <sstream>

#include "config/config_sections.h"
#include "config/hjson.h"
#include "zero/error.h"

namespace zero {

using config_detail::Diagnostics;
using config_detail::ObjectReader;

const char* to_string(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::kNone:
      return "none";
    case OffloadDevice::kCpu:
      return "cpu";
    case OffloadDevice::kNvme:
      return "nvme";
  }
  return "?";
}

const char* to_string(Bf16Compute compute) {
  switch (compute) {
    case Bf16Compute::kAuto:
      return "auto";
    case Bf16Compute::kNative:
      return "native";
    case Bf16Compute::kFp32:
      return "fp32";
  }
  return "?";
}

const char* to_string(ValueSource source) {
  switch (source) {
    case ValueSource::kDefault:
      return "default";
    case ValueSource::kFile:
      return "file";
    case ValueSource::kAuto:
      return "auto";
    case ValueSource::kAlias:
      return "file (deprecated alias)";
    case ValueSource::kAutoDefault:
      return "\"auto\": DeepSpeed's default";
  }
  return "?";
}

Config Config::parse(const std::string& json_text, const std::string& origin, bool strict) {
  nlohmann::json document = config_detail::parse_hjson(json_text, origin);
  if (!document.is_object()) {
    throw ConfigError(origin, {"(top level): expected a JSON object, got " + std::string(document.type_name())});
  }
  Config c;
  c.origin_ = origin;
  Diagnostics diag;
  diag.strict = strict;
  // DeepSpeed reads the top level key by key: an unknown key there is ignored.
  ObjectReader root(&document, "", diag, config_detail::UnknownKeys::kIgnore);
  ObjectReader own = root.child("zerocpp");  // zerocpp's own keys; DeepSpeed ignores the block
  if (own.get_bool("strict", false)) diag.strict = true;
  c.watchdog.timeout_seconds = own.get_double("collective_timeout", 1800, 0);
  c.watchdog.warning_seconds = own.get_double("collective_warning", 60, 0);
  c.bf16_compute = static_cast<Bf16Compute>(own.get_choice("bf16_compute", 0, {"auto", "native", "fp32"}));
  c.encrypt_swap = own.get_bool("encrypt_swap", false);
  // Megatron's sequence parallelism beside tensor parallelism (docs/tensor_parallel.md).
  c.tensor_parallel.sequence_parallel = own.get_bool("sequence_parallel", false);
  own.finish();

  bool is_auto = false;
  c.given_train_batch_size_ = root.get_int_or_auto("train_batch_size", 0, 1, &is_auto);
  c.given_micro_batch_ = root.get_int_or_auto("train_micro_batch_size_per_gpu", 0, 1, &is_auto);
  c.given_accumulation_ = root.get_int_or_auto("gradient_accumulation_steps", 0, 1, &is_auto);
  c.gradient_clipping = root.get_double_or_auto("gradient_clipping", 0, 0, 1e308, &is_auto);
  // null: never (DeepSpeed 0.15.2's default).
  const nlohmann::json* print_every = root.raw("steps_per_print");
  c.steps_per_print = print_every && print_every->is_null() ? 0 : root.get_int("steps_per_print", 10, 1);
  c.wall_clock_breakdown = root.get_bool("wall_clock_breakdown", false);
  c.memory_breakdown = root.get_bool("memory_breakdown", false);
  c.prescale_gradients = root.get_bool("prescale_gradients", false);
  c.gradient_predivide_factor = root.get_double("gradient_predivide_factor", 1.0, 1e-30);
  // DeepSpeed's three; absent, null or "auto": the model's own dtype (DeepSpeed's default, None).
  static const std::vector<std::string> kCommTypes = {"fp32", "fp16", "bf16"};
  const nlohmann::json* wire = root.raw("communication_data_type");
  if (!wire || wire->is_null() || *wire == "auto") {
    if (wire && *wire == "auto") {
      diag.warnings.push_back("communication_data_type: \"auto\" with no rule to resolve it: DeepSpeed's default "
                              "(the model's dtype) applies");
    }
    c.communication_data_type = CommDType::kModel;
    diag.record("communication_data_type", nullptr, wire ? ValueSource::kAutoDefault : ValueSource::kDefault);
  } else {
    c.communication_data_type = static_cast<CommDType>(1 + root.get_choice("communication_data_type", 0, kCommTypes));
  }
  // Sequence parallelism's all-to-all type: checked as DeepSpeed checks it; zerocpp has no
  // sequence parallelism, so it has no effect.
  root.get_choice("seq_parallel_comm_data_type", 0, kCommTypes);
  ObjectReader data_types = root.child("data_types", config_detail::UnknownKeys::kIgnore);
  c.grad_accum_dtype = config_detail::read_grad_accum_dtype(data_types, diag);
  data_types.finish();
  c.zero_allow_untested_optimizer = root.get_bool("zero_allow_untested_optimizer", false);
  c.zero_force_ds_cpu_optimizer = root.get_bool("zero_force_ds_cpu_optimizer", true);
  c.seed = root.get_int("seed", 1234, 0);
  // Read by DeepSpeed but acted on by nothing that changes training (dump_state prints the
  // engine's state once; disable_allgather is read and never used; graph_harvesting is CUDA
  // graphs; vocabulary_size only feeds a warning; dataloader_drop_last is a data-loader hint,
  // and zero-train always drops the last partial batch).
  root.get_bool("dump_state", false);
  root.get_bool("disable_allgather", false);
  root.get_bool("graph_harvesting", false);
  root.get_bool("use_data_before_expert_parallelism", false);
  root.get_int("vocabulary_size", 0, 0);
  root.get_bool("dataloader_drop_last", false);

  config_detail::read_precision(root, c, diag);
  config_detail::read_zero_optimization(root, c.zero, diag);
  config_detail::read_aio(root, c.aio);
  config_detail::read_optimizer(root, c.optimizer, diag);
  config_detail::read_scheduler(root, c.scheduler, diag);
  config_detail::read_monitoring(root, c, diag);
  config_detail::read_unsupported_features(root, diag);
  config_detail::read_tensor_parallel(root, c.tensor_parallel, diag);
  config_detail::read_pipeline(root, c.pipeline, diag);
  config_detail::read_expert_parallel(root, c.expert_parallel, diag);
  root.finish();
  config_detail::check_cross_key_rules(c, diag);

  if (!diag.problems.empty()) throw ConfigError(origin, diag.problems);
  c.parse_warnings_ = std::move(diag.warnings);
  c.warnings_ = c.parse_warnings_;
  c.values_ = std::move(diag.values);
  c.autos_ = diag.autos;
  c.unresolved_ = std::move(diag.autos);
  for (const auto& path : c.autos_) {
    if (path == "fp16.enabled") c.fp16_auto_ = true;
    if (path == "bf16.enabled" || path == "bfloat16.enabled") c.bf16_auto_ = true;
  }
  return c;
}

namespace {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path, {"cannot open the config file: " + path});
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path, {"cannot read the config file: " + path});
  return text.str();
}

}  // namespace

Config Config::parse_file(const std::string& path, bool strict) { return parse(read_text_file(path), path, strict); }

std::string Config::document_as_json(const std::string& path) {
  return config_detail::parse_hjson(read_text_file(path), path).dump(2);
}

Config Config::from_file(const std::string& path, const AutoContext& context) {
  Config c = parse_file(path);
  c.resolve(context);
  return c;
}

}  // namespace zero
