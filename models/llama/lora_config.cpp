#include "models/llama/lora_config.h"

#include <fmt/core.h>

#include <cmath>
#include <filesystem>

#include "checkpoint/files.h"
#include "models/llama/llama_config.h"
#include "util/json_from_file.h"
#include "zero/error.h"

namespace zero::llama {
namespace {

namespace fs = std::filesystem;


// PEFT's default targets for the Llama family (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING:
// llama, mistral and qwen2 alike).
const std::vector<std::string> kDefaultTargets = {"q_proj", "v_proj"};

}  // namespace

double LoraSpec::scaling() const {
  return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

LoraSpec lora_spec_from_options(const LoraOptions& o) {
  if (o.r <= 0) throw Error(fmt::format("--lora_r {}: the rank must be at least 1", o.r), "--lora_r");
  if (!(o.dropout >= 0 && o.dropout < 1))
    throw Error(fmt::format("--lora_dropout {}: must be in [0, 1)", o.dropout), "--lora_dropout");
  LoraSpec spec{.r = o.r, .alpha = o.alpha, .dropout = o.dropout, .target_modules = nlohmann::json(), .use_rslora = o.use_rslora,
                .modules_to_save = o.modules_to_save};
  const std::vector<std::string>& targets = o.target_modules.empty() ? kDefaultTargets : o.target_modules;
  if (targets.size() == 1 && targets[0] == "all-linear") {
    spec.target_modules = "all-linear";
  } else {
    spec.target_modules = nlohmann::json::array();
    for (const auto& t : targets) {
      if (t == "all-linear") throw Error("--lora_target_modules: all-linear stands alone", "--lora_target_modules");
      spec.target_modules.push_back(t);
    }
  }
  return spec;
}

LoraSpec read_adapter_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "adapter_config.json").string();
  if (!fs::exists(path)) throw Error(path + ": not found (is " + dir + " a PEFT adapter directory?)", path);
  const nlohmann::json c = parse_json_from(checkpoint::read_text_file(path), path);
  auto fail = [&](const std::string& key, const std::string& why) -> Error {
    return Error(fmt::format("{}: \"{}\" {}", path, key, why), key);
  };
  if (!c.is_object()) throw Error(path + ": not a JSON object", path);
  if (!c.contains("peft_type") || c["peft_type"] != "LORA")
    throw fail("peft_type", "is " + c.value("peft_type", nlohmann::json()).dump() + ": only LORA adapters are trained here");
  LoraSpec spec;
  if (!c.contains("r") || !json_to(c["r"], spec.r) || spec.r <= 0) throw fail("r", "must be a positive integer");
  if (!c.contains("lora_alpha") || !c["lora_alpha"].is_number()) throw fail("lora_alpha", "must be a number");
  spec.alpha = c["lora_alpha"].get<double>();
  const nlohmann::json dropout = c.value("lora_dropout", nlohmann::json(0.0));
  if (!dropout.is_number() || !(dropout.get<double>() >= 0 && dropout.get<double>() < 1))
    throw fail("lora_dropout", "must be a number in [0, 1)");
  spec.dropout = dropout.get<double>();
  const nlohmann::json rslora = c.value("use_rslora", nlohmann::json(false));
  if (!rslora.is_boolean()) throw fail("use_rslora", "must be true or false");
  spec.use_rslora = rslora.get<bool>();
  const nlohmann::json targets = c.value("target_modules", nlohmann::json());
  if (targets.is_string()) {
    if (targets.get<std::string>() != "all-linear")
      throw fail("target_modules", "is a regular expression: not supported yet (list the module names)");
    spec.target_modules = targets;
  } else if (targets.is_array() && !targets.empty()) {
    for (const auto& t : targets)
      if (!t.is_string()) throw fail("target_modules", "must hold module names");
    spec.target_modules = targets;
  } else {
    throw fail("target_modules", "must be a list of module names or \"all-linear\"");
  }
  const nlohmann::json saved = c.value("modules_to_save", nlohmann::json());
  if (saved.is_array()) {
    for (const auto& m : saved) {
      if (!m.is_string()) throw fail("modules_to_save", "must hold module names");
      spec.modules_to_save.push_back(m.get<std::string>());
    }
  } else if (!saved.is_null()) {
    throw fail("modules_to_save", "must be a list of module names or null");
  }
  // What PEFT's LoraConfig can say that these adapters do not compute: refused, never ignored.
  auto refuse_unless = [&](const char* key, const nlohmann::json& plain, const std::string& what) {
    if (c.contains(key) && !c[key].is_null() && c[key] != plain) throw fail(key, "is " + c[key].dump() + ": " + what + " is not supported");
  };
  refuse_unless("bias", "none", "training biases with the adapter");
  refuse_unless("use_dora", false, "DoRA");
  refuse_unless("fan_in_fan_out", false, "a transposed (Conv1D) base layer");
  refuse_unless("rank_pattern", nlohmann::json::object(), "a rank per layer");
  refuse_unless("alpha_pattern", nlohmann::json::object(), "an alpha per layer");
  refuse_unless("layers_to_transform", nlohmann::json(), "adapting only some layers");
  refuse_unless("trainable_token_indices", nlohmann::json(), "trainable tokens");
  return spec;
}

std::string peft_name(const std::string& engine_name) { return std::string(kPeftPrefix) + hf_name(engine_name); }

nlohmann::ordered_json adapter_config_json(const LoraSpec& spec, const std::string& base_dir) {
  nlohmann::ordered_json c;
  c["peft_type"] = "LORA";
  c["task_type"] = "CAUSAL_LM";
  c["base_model_name_or_path"] = base_dir;
  c["r"] = spec.r;
  c["lora_alpha"] = spec.alpha;
  c["lora_dropout"] = spec.dropout;
  c["target_modules"] = spec.target_modules;
  c["use_rslora"] = spec.use_rslora;
  c["modules_to_save"] = spec.modules_to_save.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(spec.modules_to_save);
  c["bias"] = "none";
  c["fan_in_fan_out"] = false;
  c["init_lora_weights"] = true;
  c["inference_mode"] = true;
  c["layers_to_transform"] = nullptr;
  c["layers_pattern"] = nullptr;
  c["rank_pattern"] = nlohmann::ordered_json::object();
  c["alpha_pattern"] = nlohmann::ordered_json::object();
  c["use_dora"] = false;
  c["revision"] = nullptr;
  return c;
}

}  // namespace zero::llama
