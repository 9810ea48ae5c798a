#include "checkpoint/consolidate.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <vector>

#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"
#include "models/gpt/llmc_files.h"
#include "zero/error.h"

namespace zero::checkpoint {
namespace {

// Saved parameter `param`'s fp32 master weights, whole.
std::vector<float> master_of(CheckpointReader& reader, int param) {
  std::vector<float> values(static_cast<size_t>(reader.numel(param)));
  reader.read(param, reader.kind("master"), 0, reader.numel(param), values.data());
  return values;
}

template <class Out>
std::vector<Out> converted(const std::vector<float>& values) {
  std::vector<Out> out(values.size());
  std::transform(values.begin(), values.end(), out.begin(), [](float v) { return Out(v); });  // round to nearest even
  return out;
}

ConsolidateResult write_safetensors(CheckpointReader& reader, const ConsolidateOptions& o) {
  const char* dtype = o.dtype == OutputDtype::kFp32 ? "F32" : o.dtype == OutputDtype::kBf16 ? "BF16" : "F16";
  const uint64_t element = o.dtype == OutputDtype::kFp32 ? 4 : 2;
  std::vector<SafetensorsEntry> entries;
  ConsolidateResult result;
  for (int p = 0; p < reader.num_params(); ++p) {
    entries.push_back({reader.name(p), dtype, reader.shape(p), element * static_cast<uint64_t>(reader.numel(p))});
    result.largest_tensor = std::max(result.largest_tensor, reader.numel(p));
    result.elements += reader.numel(p);
  }
  result.tensors = reader.num_params();
  SafetensorsWriter writer(o.out, entries,
                           {{"format", "pt"}, {"source", "zerocpp checkpoint " + reader.tag()},
                            {"global_steps", reader.manifest()["counters"]["global_steps"].dump()}});
  for (int p = 0; p < reader.num_params(); ++p) {
    const std::vector<float> values = master_of(reader, p);
    if (o.dtype == OutputDtype::kFp32) {
      writer.append(values.data(), 4 * values.size());
    } else if (o.dtype == OutputDtype::kBf16) {
      const auto out = converted<c10::BFloat16>(values);
      writer.append(out.data(), 2 * out.size());
    } else {
      const auto out = converted<c10::Half>(values);
      writer.append(out.data(), 2 * out.size());
    }
  }
  writer.finish();
  return result;
}

// zero-train stores the model's shape in its client state; llm.c lays tensors out by kind
// across layers (models/gpt/llmc_files.h), ours are named h<l>.block.<kind> and <kind>.
ConsolidateResult write_llmc(CheckpointReader& reader, const ConsolidateOptions& o) {
  if (o.dtype != OutputDtype::kFp32) throw Error("--format llmc writes fp32 (llm.c's version 3)", "--dtype");
  const nlohmann::json& client = reader.manifest().value("client_state", nlohmann::json::object());
  if (!client.contains("gpt"))
    throw Error(reader.manifest_path() + ": no GPT shape in the client state (--format llmc needs a checkpoint saved "
                                         "by zero-train)",
                reader.manifest_path());
  const nlohmann::json& g = client["gpt"];
  const gpt::GptShape shape{.max_seq = g.at("max_seq"), .vocab = g.at("vocab"), .layers = g.at("layers"),
                            .heads = g.at("heads"), .channels = g.at("channels"),
                            .padded_vocab = g.at("padded_vocab")};
  ConsolidateResult result;
  gpt::LlmcCheckpointWriter writer(o.out, shape);
  auto append = [&](const std::string& name) {
    const int p = reader.find(name);
    if (p < 0) throw Error(reader.manifest_path() + ": no parameter " + name + " for --format llmc", reader.manifest_path());
    const std::vector<float> values = master_of(reader, p);
    writer.append(values.data(), static_cast<int64_t>(values.size()));
    result.largest_tensor = std::max(result.largest_tensor, reader.numel(p));
    result.elements += reader.numel(p);
    ++result.tensors;
  };
  for (const gpt::TensorSpec& spec : gpt::checkpoint_tensors(shape)) {
    if (!gpt::per_layer(spec)) {
      append(spec.name);
      continue;
    }
    for (int l = 0; l < shape.layers; ++l) append("h" + std::to_string(l) + ".block." + spec.name);
  }
  writer.finish();
  return result;
}

}  // namespace

ConsolidateResult consolidate(const ConsolidateOptions& options) {
  CheckpointReader reader(options.dir, options.tag);
  if (reader.kind("master") < 0)
    throw Error(reader.manifest_path() + ": the checkpoint holds no master weights", reader.manifest_path());
  return options.format == OutputFormat::kLlmc ? write_llmc(reader, options) : write_safetensors(reader, options);
}

}  // namespace zero::checkpoint
