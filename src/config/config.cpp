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
  }
  return "?";
}

Config Config::parse(const std::string& json_text, const std::string& origin) {
  nlohmann::json document = config_detail::parse_hjson(json_text, origin);
  if (!document.is_object()) {
    throw ConfigError(origin, {"(top level): expected a JSON object, got " + std::string(document.type_name())});
  }
  Config c;
  c.origin_ = origin;
  Diagnostics diag;
  ObjectReader root(&document, "", diag);

  bool is_auto = false;
  c.given_train_batch_size_ = root.get_int_or_auto("train_batch_size", 0, 1, &is_auto);
  c.given_micro_batch_ = root.get_int_or_auto("train_micro_batch_size_per_gpu", 0, 1, &is_auto);
  c.given_accumulation_ = root.get_int_or_auto("gradient_accumulation_steps", 0, 1, &is_auto);
  c.gradient_clipping = root.get_double_or_auto("gradient_clipping", 0, 0, 1e308, &is_auto);
  c.steps_per_print = root.get_int("steps_per_print", 10, 1);
  c.wall_clock_breakdown = root.get_bool("wall_clock_breakdown", false);
  c.memory_breakdown = root.get_bool("memory_breakdown", false);
  c.prescale_gradients = root.get_bool("prescale_gradients", false);
  c.gradient_predivide_factor = root.get_double("gradient_predivide_factor", 1.0, 1e-30);
  static const std::vector<std::string> kCommTypes = {"model", "fp32", "fp16", "bf16"};
  c.communication_data_type = static_cast<CommDType>(root.get_choice("communication_data_type", 0, kCommTypes));
  ObjectReader data_types = root.child("data_types");
  static const std::vector<std::string> kAccumTypes = {"fp32", "fp16", "bf16"};
  c.grad_accum_dtype = static_cast<CommDType>(1 + data_types.get_choice("grad_accum_dtype", 0, kAccumTypes));
  data_types.finish();
  c.zero_allow_untested_optimizer = root.get_bool("zero_allow_untested_optimizer", false);
  c.zero_force_ds_cpu_optimizer = root.get_bool("zero_force_ds_cpu_optimizer", true);
  c.seed = root.get_int("seed", 1234, 0);
  root.require_default("dump_state", false);
  root.require_default("disable_allgather", false);
  root.accept({"dataloader_drop_last"});  // a data-loader hint; zero-train always drops the last partial batch

  config_detail::read_precision(root, c, diag);
  config_detail::read_zero_optimization(root, c.zero, diag);
  config_detail::read_aio(root, c.aio);
  config_detail::read_optimizer(root, c.optimizer, diag);
  config_detail::read_scheduler(root, c.scheduler, diag);
  config_detail::read_monitoring(root, c, diag);
  config_detail::read_unsupported_features(root, diag);
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

Config Config::parse_file(const std::string& path) { return parse(read_text_file(path), path); }

std::string Config::document_as_json(const std::string& path) {
  return config_detail::parse_hjson(read_text_file(path), path).dump(2);
}

Config Config::from_file(const std::string& path, const AutoContext& context) {
  Config c = parse_file(path);
  c.resolve(context);
  return c;
}

}  // namespace zero
