#include "models/llama/lora.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "checkpoint/files.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_reader.h"
#include "models/llama/four_bit.h"
#include "models/llama/hf_model_dir.h"
#include "models/llama/lora_merge.h"
#include "util/json_from_file.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/communicator.h"
#include "zero/world.h"

namespace zero::llama {
namespace {

namespace fs = std::filesystem;


void load_adapter(LlamaForCausalLM& model, const std::string& adapter_dir, std::map<std::string, at::Tensor>& saved);
void quantize_base(LlamaForCausalLM& model, const LoraOptions& options);

std::string key_list(const nlohmann::json& targets) {
  if (targets.is_string()) return targets.get<std::string>();
  std::vector<std::string> names;
  for (const auto& t : targets) names.push_back(t.get<std::string>());
  return fmt::format("{}", fmt::join(names, " "));
}

// The linear layers a LoRA may target, by their Hugging Face module names ("model.layers.0.
// self_attn.q_proj"), in the model's registration order.
std::vector<std::pair<std::string, std::shared_ptr<Weights>>> linear_layers(LlamaForCausalLM& model) {
  std::vector<std::pair<std::string, std::shared_ptr<Weights>>> out;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    auto weights = std::dynamic_pointer_cast<Weights>(item.value());
    if (!weights || weights->weight.dim() != 2) continue;
    const std::string name = hf_name(item.key() + ".weight");
    out.emplace_back(name.substr(0, name.size() - std::string(".weight").size()), weights);
  }
  return out;
}

bool names_match(const std::string& module, const std::string& target) {
  return module == target || (module.size() > target.size() && module.ends_with("." + target));
}

// Whether `module` is one of the spec's targets (PEFT's check_target_module_exists for a list, and
// its "all-linear" shorthand: every linear layer but the output layer).
bool targeted(const std::string& module, const nlohmann::json& targets) {
  if (targets.is_string()) return module != "lm_head" && module != "model.embed_tokens";
  for (const auto& t : targets)
    if (names_match(module, t.get<std::string>())) return true;
  return false;
}

// Values of a tensor in an adapter file as `like`'s dtype, checked against its shape.
at::Tensor adapter_tensor(const checkpoint::SafetensorsFile& file, const checkpoint::SafetensorsTensor& t,
                          const at::Tensor& like) {
  if (t.shape != like.sizes().vec()) {
    throw Error(fmt::format("{}: {} has shape [{}], this model's is [{}] (an adapter for another base model?)",
                            file.path(), t.name, fmt::join(t.shape, ", "), fmt::join(like.sizes(), ", ")),
                t.name);
  }
  if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16") {
    throw Error(fmt::format("{}: {} is {}; adapters are F32, BF16 or F16", file.path(), t.name, t.dtype), t.name);
  }
  const at::Tensor raw = at::from_blob(const_cast<void*>(file.data(t)), t.shape, scalar_type_of(t.dtype));
  return raw.to(like.scalar_type()).clone();
}

}  // namespace

LoraSpec attach_lora(LlamaForCausalLM& model, const LoraOptions& options) {
  if (model.place.group) throw Error("LoRA with tensor parallelism is not built yet", "--use_peft");
  if (model.stage.stages > 1) throw Error("LoRA with pipeline parallelism is not built yet", "--use_peft");
  if (model.config.moe.num_experts > 0)
    throw Error("LoRA on a mixture-of-experts model is not built yet", "--use_peft");
  const bool resume = !options.adapter_dir.empty();
  const LoraSpec spec = resume ? read_adapter_config(options.adapter_dir) : lora_spec_from_options(options);
  const std::string origin = resume ? (fs::path(options.adapter_dir) / "adapter_config.json").string()
                                    : std::string("--lora_target_modules");
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) p.requires_grad_(false);  // the frozen base

  // The adapters: lora_A Kaiming-uniform with a = √5 (bound 1/√in), drawn in fp32 from the seed on
  // every rank alike; lora_B zero (PEFT's init_lora_weights=True).
  at::Generator generator = at::detail::createCPUGenerator(options.seed);
  std::vector<std::string> layer_kinds;
  std::set<std::string> adapted;
  for (auto& [name, w] : linear_layers(model)) {
    const std::string kind = name.substr(name.rfind('.') + 1);
    if (std::find(layer_kinds.begin(), layer_kinds.end(), kind) == layer_kinds.end()) layer_kinds.push_back(kind);
    if (!targeted(name, spec.target_modules)) continue;
    if (name == "lm_head" || name == "model.embed_tokens")
      throw Error(fmt::format("{}: LoRA on {} is not built yet (train it whole with modules_to_save)", origin, name), name);
    const int64_t out = w->weight.size(0), in = w->weight.size(1);
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    const at::Tensor a = at::empty({spec.r, in}, at::kFloat).uniform_(-bound, bound, generator);
    w->lora_A = w->register_module("lora_A", std::make_shared<LoraMatrix>(a.to(w->weight.scalar_type())));
    w->lora_B = w->register_module("lora_B", std::make_shared<LoraMatrix>(at::zeros({out, spec.r}, w->weight.options())));
    w->lora_scaling = spec.scaling();
    w->lora_dropout = spec.dropout;
    w->lora_A->weight.requires_grad_(true);
    w->lora_B->weight.requires_grad_(true);
    adapted.insert(name);
  }
  if (adapted.empty()) {
    throw Error(fmt::format("{}: target modules {} match no linear layer of the model (its layers: {})", origin,
                            key_list(spec.target_modules), fmt::join(layer_kinds, ", ")),
                origin);
  }
  // The modules to save are trained whole (PEFT trains a copy and freezes the original: the same
  // numbers, and one tensor less here). A tied lm_head is the embedding: saving one would untie them.
  std::map<std::string, at::Tensor> saved;  // PEFT name → the parameter trained
  for (const std::string& m : spec.modules_to_save) {
    // (A tied model registers no lm_head: the name alone says it.)
    if (model.config.tie_word_embeddings && (names_match("lm_head", m) || names_match("model.embed_tokens", m))) {
      throw Error(fmt::format("{}: modules_to_save {}: the model ties lm_head to the embedding; saving one of them "
                              "apart is not built yet",
                              origin, m),
                  m);
    }
    bool found = false;
    for (auto& [name, w] : linear_layers(model)) {
      if (!names_match(name, m)) continue;
      if (adapted.count(name)) throw Error(fmt::format("{}: {} is both adapted and saved whole", origin, name), m);
      for (auto& p : w->parameters(/*recurse=*/false)) p.requires_grad_(true);
      saved[std::string(kPeftPrefix) + name + ".weight"] = w->weight;
      if (w->bias.defined()) saved[std::string(kPeftPrefix) + name + ".bias"] = w->bias;
      found = true;
    }
    if (!found) throw Error(fmt::format("{}: modules_to_save {} matches no module of the model", origin, m), m);
  }
  if (resume) load_adapter(model, options.adapter_dir, saved);
  if (options.load_in_4bit) quantize_base(model, options);
  return spec;
}

namespace {

// QLoRA: every frozen linear layer of the base but lm_head in 4 bits, the embedding as it is (transformers' bitsandbytes
// integration converts all of them, keeping the output layer).
void quantize_base(LlamaForCausalLM& model, const LoraOptions& options) {
  const FourBitType type = four_bit_type(options.bnb_4bit_quant_type);
  const std::string& compute = options.bnb_4bit_compute_dtype;
  for (auto& [name, w] : linear_layers(model)) {
    if (name == "lm_head" || name == "model.embed_tokens" || w->weight.requires_grad()) continue;
    if (!compute.empty()) {
      const at::ScalarType want = compute == "bfloat16" ? at::kBFloat16 : compute == "float16" ? at::kHalf
                                 : compute == "float32" ? at::kFloat : at::kByte;
      if (want == at::kByte)
        throw Error("--bnb_4bit_compute_dtype " + compute + ": expected bfloat16, float16 or float32", "--bnb_4bit_compute_dtype");
      if (want != w->weight.scalar_type()) {
        throw Error(fmt::format("--bnb_4bit_compute_dtype {}: the run computes in {} (the DeepSpeed config's precision); "
                                "give the same or leave the flag out",
                                compute, c10::toString(w->weight.scalar_type())),
                    "--bnb_4bit_compute_dtype");
      }
    }
    w->quantize_to_4bit(static_cast<int>(type), options.bnb_4bit_use_double_quant);
  }
}

void load_adapter(LlamaForCausalLM& model, const std::string& adapter_dir, std::map<std::string, at::Tensor>& saved) {
  // Continue training an adapter: every tensor its file holds must land somewhere, and every
  // adapter this model makes must be in it.
  const std::string file_path = (fs::path(adapter_dir) / "adapter_model.safetensors").string();
  if (!fs::exists(file_path)) throw Error(file_path + ": not found", file_path);
  const checkpoint::SafetensorsFile file(file_path);
  std::set<std::string> used;
  auto load = [&](const std::string& key, at::Tensor& target) {
    const checkpoint::SafetensorsTensor* t = file.find(key);
    if (!t) throw Error(fmt::format("{}: no tensor {} (the adapter's config targets that layer)", file_path, key), key);
    target.copy_(adapter_tensor(file, *t, target));
    used.insert(key);
  };
  for (auto& [name, w] : linear_layers(model)) {
    if (!w->lora_A) continue;
    load(std::string(kPeftPrefix) + name + ".lora_A.weight", w->lora_A->weight);
    load(std::string(kPeftPrefix) + name + ".lora_B.weight", w->lora_B->weight);
  }
  for (auto& [key, p] : saved) {
    if (file.find(key)) load(key, p);  // (absent: the module starts from the base's weights)
  }
  for (const auto& t : file.tensors()) {
    if (!used.count(t.name)) {
      throw Error(fmt::format("{}: {} belongs to no adapted layer or saved module of this model (an adapter for "
                              "another base model?)",
                              file_path, t.name),
                  t.name);
    }
  }
}

}  // namespace

void write_peft_adapter(Engine& engine, const LoraSpec& spec, const std::string& base_dir, const std::string& dir,
                        World& world) {
  const std::vector<Engine::ParameterInfo> params = engine.parameter_infos();
  std::vector<checkpoint::SafetensorsEntry> entries;
  for (const auto& p : params)
    entries.push_back({peft_name(p.name), safetensors_dtype_name(p.dtype), p.shape, static_cast<uint64_t>(p.bytes)});
  // Made on rank 0 inside the visit, so that a directory it cannot write is every rank's error
  // (visit_whole_parameters agrees on it) rather than rank 0's alone before the gathers.
  std::unique_ptr<checkpoint::SafetensorsWriter> writer;
  auto open = [&] {
    if (writer) return;
    fs::create_directories(dir);
    writer = std::make_unique<checkpoint::SafetensorsWriter>((fs::path(dir) / "adapter_model.safetensors").string(),
                                                             entries, std::map<std::string, std::string>{{"format", "pt"}});
  };
  engine.visit_whole_parameters(
      [&](size_t, const at::Tensor& whole) {
        open();
        const at::Tensor t = whole.contiguous();
        writer->append(t.data_ptr(), static_cast<uint64_t>(t.nbytes()));
      },
      [&] {
        open();
        writer->finish();
        const nlohmann::ordered_json c = adapter_config_json(spec, base_dir);
        checkpoint::write_file_atomically((fs::path(dir) / "adapter_config.json").string(), c.dump(2) + "\n");
      },
      0, "adapter export to " + dir);
}

void write_merged_model(Engine& engine, const LoraSpec& spec, const std::string& base_dir, const std::string& dir,
                        World& world) {
  const std::string adapter = (fs::path(dir) / "adapter").string();
  write_peft_adapter(engine, spec, base_dir, adapter, world);
  std::string error;
  if (world.rank() == 0) {
    try {
      merge_lora(base_dir, adapter, dir);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(world.communicator(), error, world.rank(), "merging the adapter into " + dir);
}

}  // namespace zero::llama
