// A Hugging Face model directory in and out: config.json + safetensors weights (one file or
// shards with their index), plus the generation config and tokenizer files that travel with it.
//
// In: open_hf_model checks everything before a model is built — the config (llama_config.h),
// every tensor the config implies present with its shape and a dtype of F32, BF16 or F16, no
// tensor the model would not use — and each error names the file and the tensor. The weights
// are then read from the mapped files as the model is built (WeightSource), converted to the
// training dtype, one tensor at a time.
//
// Out: write_hf_model gathers the engine's parameters one stage-3 unit at a time (never the whole
// model on a rank) and rank 0 streams them into a directory that transformers' from_pretrained
// loads (checkpoint/hf_directory_writer.h), with config.json's torch_dtype set to the weights'
// dtype and the input's other files copied.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/safetensors_reader.h"
#include "models/llama/llama.h"

namespace zero {
class Engine;
class World;
}  // namespace zero

namespace zero::llama {

struct HfModel {
  std::string dir;
  LlamaConfig config;
  nlohmann::ordered_json config_json;  // config.json as written (exported back with torch_dtype updated)
  std::unique_ptr<checkpoint::SafetensorsModel> weights;
  std::string weights_dtype;  // "F32", "BF16" or "F16": what the files hold (the first tensor's)
};

// Reads DIR/config.json and the weights' headers, and checks them against each other.
HfModel open_hf_model(const std::string& dir);

// Tensors transformers ignores when it loads (rotary inv_freq buffers some conversions kept; a
// tied lm_head.weight saved anyway): neither used nor an error.
bool ignored_hf_tensor(const LlamaConfig& config, const std::string& name);

// Reads the weights from the mapped files, converting each to the dtype asked for.
std::unique_ptr<WeightSource> file_weights(const HfModel& model);

struct HfExportOptions {
  std::string out_dir;
  std::string source_dir;        // the input model directory (side files copied from it), or empty
  uint64_t max_shard_bytes = 0;  // 0: one model.safetensors
  // Pipeline parallelism: this rank's pipeline group (ParallelGrid::pipeline). The first stage
  // writes, the others send it their tensors stage by stage. Null: one stage.
  World* pipeline = nullptr;
};

// Collective: every rank calls it. Rank 0 writes the directory; every rank raises the error if
// rank 0 failed (nothing is left in out_dir then). The weights are in the model's training dtype.
void write_hf_model(Engine& engine, const LlamaForCausalLM& model, const nlohmann::ordered_json& config_json,
                    const HfExportOptions& options, World& world);

// The safetensors dtype name of a torch dtype, and transformers' torch_dtype string for it.
std::string safetensors_dtype_name(at::ScalarType dtype);
std::string torch_dtype_name(const std::string& safetensors_dtype);
at::ScalarType scalar_type_of(const std::string& safetensors_dtype);

}  // namespace zero::llama
