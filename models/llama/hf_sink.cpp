#include "models/llama/hf_sink.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include "checkpoint/files.h"
#include "checkpoint/hf_directory_writer.h"
#include "models/llama/llama_config.h"
#include "models/llama/lora_config.h"
#include "zero/error.h"

namespace zero::llama {
namespace {

class HfSink : public checkpoint::ConsolidationSink {
 public:
  HfSink(std::string out, std::string dtype, uint64_t max_shard) : out_(std::move(out)), dtype_(std::move(dtype)), max_shard_(max_shard) {}

  std::vector<int> order(const checkpoint::WholeParameters& reader) override {
    const nlohmann::json& m = reader.manifest();
    const nlohmann::json client = m.value("client_state", nlohmann::json::object());
    if (!client.contains("llama")) {
      throw Error(reader.manifest_path() + ": not a checkpoint of a Hugging Face model (zero-train --model): its client "
                                           "state has no \"llama\" entry",
                  reader.manifest_path());
    }
    config_ = nlohmann::ordered_json::parse(client["llama"]["config"].dump());
    source_dir_ = client["llama"].value("source_dir", std::string());
    if (dtype_.empty()) {
      const std::string trained = m.value("model_dtype", std::string("Float"));
      dtype_ = trained == "BFloat16" ? "bf16" : trained == "Half" ? "fp16" : "fp32";
    }
    const char* name = dtype_ == "bf16" ? "BF16" : dtype_ == "fp16" ? "F16" : "F32";
    const uint64_t element = dtype_ == "fp32" ? 4 : 2;
    std::vector<checkpoint::SafetensorsEntry> entries;
    std::vector<int> order;
    // A LoRA run trained its adapter only: PEFT's files, under PEFT's names.
    const nlohmann::json lora = client["llama"].value("lora", nlohmann::json());
    for (int p = 0; p < reader.num_params(); ++p) {
      entries.push_back({lora.is_object() ? peft_name(reader.name(p)) : hf_name(reader.name(p)), name, reader.shape(p),
                         element * static_cast<uint64_t>(reader.numel(p))});
      order.push_back(p);
    }
    if (lora.is_object()) {
      try {
        adapter_ = LoraSpec{.r = lora.at("r").get<int64_t>(),
                          .alpha = lora.at("lora_alpha").get<double>(),
                          .dropout = lora.at("lora_dropout").get<double>(),
                          .target_modules = lora.at("target_modules"),
                          .use_rslora = lora.at("use_rslora").get<bool>(),
                          .modules_to_save = lora.at("modules_to_save").get<std::vector<std::string>>()};
      } catch (const nlohmann::json::exception& e) {
        throw Error(reader.manifest_path() + ": client_state.llama.lora: " + e.what(), reader.manifest_path());
      }
      std::filesystem::create_directories(out_);
      adapter_writer_ = std::make_unique<checkpoint::SafetensorsWriter>(
          (std::filesystem::path(out_) / "adapter_model.safetensors").string(), entries,
          std::map<std::string, std::string>{{"format", "pt"}});
      return order;
    }
    writer_ = std::make_unique<checkpoint::HfDirectoryWriter>(out_, entries, max_shard_);
    return order;
  }

  void append(int, const std::vector<float>& values) override {
    if (dtype_ == "fp32") return write(values.data(), 4 * values.size());
    if (dtype_ == "bf16") return append_as<c10::BFloat16>(values);
    append_as<c10::Half>(values);
  }

  void finish() override {
    if (adapter_) {
      adapter_writer_->finish();
      checkpoint::write_file_atomically((std::filesystem::path(out_) / "adapter_config.json").string(),
                                        adapter_config_json(*adapter_, source_dir_).dump(2) + "\n");
      return;
    }
    config_["torch_dtype"] = dtype_ == "bf16" ? "bfloat16" : dtype_ == "fp16" ? "float16" : "float32";
    writer_->add_file("config.json", config_.dump(2) + "\n");
    namespace fs = std::filesystem;
    for (const auto& name : hf_side_files()) {
      const fs::path from = fs::path(source_dir_) / name;
      if (!source_dir_.empty() && fs::exists(from)) writer_->add_file(name, checkpoint::read_text_file(from.string()));
    }
    writer_->finish();
  }

 private:
  template <class Out>
  void append_as(const std::vector<float>& values) {
    std::vector<Out> out(values.size());
    std::transform(values.begin(), values.end(), out.begin(), [](float v) { return Out(v); });  // nearest even
    write(out.data(), sizeof(Out) * out.size());
  }
  void write(const void* data, uint64_t bytes) {
    if (adapter_writer_) return adapter_writer_->append(data, bytes);
    writer_->append(data, bytes);
  }

  std::string out_, dtype_;
  uint64_t max_shard_;
  nlohmann::ordered_json config_;
  std::string source_dir_;
  std::unique_ptr<checkpoint::HfDirectoryWriter> writer_;
  std::optional<LoraSpec> adapter_;  // a LoRA run's checkpoint: its adapter
  std::unique_ptr<checkpoint::SafetensorsWriter> adapter_writer_;
};

}  // namespace

std::unique_ptr<checkpoint::ConsolidationSink> hf_sink(const std::string& out_dir, const std::string& dtype,
                                                        uint64_t max_shard_bytes) {
  return std::make_unique<HfSink>(out_dir, dtype, max_shard_bytes);
}

}  // namespace zero::llama
