// The checkpoint format (docs/checkpoints.md), defined once: the manifest's content as a struct,
// its writer (to_json, used by Engine::save_checkpoint) beside its reader (layout_from_json,
// used by CheckpointReader), and the names of the files beside it. Torch-free.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace zero::checkpoint {

inline constexpr const char* kFormatName = "zerocpp-checkpoint";
inline constexpr int kFormatVersion = 1;

std::string shard_file_name(int rank);  // rank R's owned fp32 buffers: "rank<R>.bin"
std::string rng_file_name(int rank);    // rank R's CPU random state: "rank<R>.rng"

// Where a saved parameter's elements [begin, end) sit in a shard file's flat buffers.
struct ManifestFragment {
  int param = 0;
  int64_t begin = 0, end = 0, owned_offset = 0;
};
struct ManifestParam {
  std::string name;
  std::vector<int64_t> shape;
};
struct ManifestShard {  // one rank's file: each kind's owned_numel fp32 values, kind after kind
  int rank = 0;
  uint64_t bytes = 0, xxh3 = 0;
  int64_t owned_numel = 0;
  std::vector<ManifestFragment> fragments;
};
struct ManifestFile {
  int rank = 0;
  uint64_t bytes = 0, xxh3 = 0;
};

// What a checkpoint's layout is: enough to read any element of any saved state.
struct ManifestLayout {
  std::vector<ManifestParam> params;
  std::vector<std::string> kinds;  // "master", then the optimizer's states
  std::vector<ManifestShard> shards;
};

struct Manifest {
  std::string tag;
  int world_size = 1, stage = 0;
  std::string model_dtype;  // c10's name ("Float", "BFloat16", ...)
  std::string params16;     // a 16-bit model's dtype (its weights follow the fp32 kinds); empty: fp32
  int64_t train_batch_size = 0;
  std::string config_origin;
  std::vector<std::pair<std::string, std::string>> config;  // key path, value as `zero-config check` prints it
  ManifestLayout layout;
  std::vector<ManifestFile> rng_states;
  int64_t global_steps = 0, micro_steps = 0, skipped_steps = 0, applied_steps = 0;
  int64_t lr_last_batch_iteration = -1;
  double loss_scale = 1;
  int64_t scaler_iteration = 0, scaler_last_overflow_iteration = -1;
  int scaler_hysteresis_left = 0;
  nlohmann::json client_state = nlohmann::json::object();
};

nlohmann::json to_json(const Manifest& manifest);
// The layout part of a manifest; throws nlohmann::json::exception when it is malformed.
ManifestLayout layout_from_json(const nlohmann::json& manifest);
// Every key a reader of the manifest uses, with its type and range, checked before any is used:
// an error naming `path` and the key ("files[2].file: missing") otherwise. Files are plain names
// inside the checkpoint; shapes, fragments and counts are checked against each other with
// overflow-checked arithmetic, so nothing read later can index past what the manifest declares.
void check_manifest(const nlohmann::json& manifest, const std::string& path);

}  // namespace zero::checkpoint
