#include "models/llama/lora_merge.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "checkpoint/files.h"
#include "checkpoint/hf_directory_writer.h"
#include "checkpoint/safetensors_reader.h"
#include "models/llama/llama_config.h"
#include "models/llama/lora_config.h"
#include "zero/error.h"

namespace zero::llama {
namespace {

namespace fs = std::filesystem;
using checkpoint::SafetensorsFile;
using checkpoint::SafetensorsTensor;

std::vector<float> read_floats(const SafetensorsFile& file, const SafetensorsTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  const void* data = file.data(t);
  if (t.dtype == "F32") {
    std::memcpy(out.data(), data, out.size() * sizeof(float));
  } else if (t.dtype == "BF16") {
    const auto* in = static_cast<const c10::BFloat16*>(data);
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(in[i]);
  } else if (t.dtype == "F16") {
    const auto* in = static_cast<const c10::Half*>(data);
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(in[i]);
  } else {
    throw Error(fmt::format("{}: {} is {}; expected F32, BF16 or F16", file.path(), t.name, t.dtype), t.name);
  }
  return out;
}

template <class T>
std::vector<uint8_t> as_bytes_of(const std::vector<float>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  auto* o = reinterpret_cast<T*>(out.data());
  for (size_t i = 0; i < values.size(); ++i) o[i] = T(values[i]);  // nearest even
  return out;
}

std::vector<uint8_t> to_bytes(const std::vector<float>& values, const std::string& dtype) {
  if (dtype == "BF16") return as_bytes_of<c10::BFloat16>(values);
  if (dtype == "F16") return as_bytes_of<c10::Half>(values);
  return as_bytes_of<float>(values);
}

struct AdapterParts {
  const SafetensorsTensor* a = nullptr;
  const SafetensorsTensor* b = nullptr;
  const SafetensorsTensor* whole = nullptr;  // a module saved whole
};

}  // namespace

MergeResult merge_lora(const std::string& base_dir, const std::string& adapter_dir, const std::string& out_dir,
                       uint64_t max_shard_bytes) {
  const LoraSpec spec = read_adapter_config(adapter_dir);
  const float scaling = static_cast<float>(spec.scaling());
  const checkpoint::SafetensorsModel base(base_dir);
  const std::string adapter_path = (fs::path(adapter_dir) / "adapter_model.safetensors").string();
  if (!fs::exists(adapter_path)) throw Error(adapter_path + ": not found", adapter_path);
  const SafetensorsFile adapter(adapter_path);
  // Every adapter tensor onto the base tensor it changes.
  std::map<std::string, AdapterParts> parts;
  const std::string prefix = kPeftPrefix;
  for (const SafetensorsTensor& t : adapter.tensors()) {
    if (!t.name.starts_with(prefix))
      throw Error(fmt::format("{}: {} is not a PEFT name (no {} prefix)", adapter_path, t.name, prefix), t.name);
    std::string name = t.name.substr(prefix.size());
    AdapterParts* p = nullptr;
    for (const char* suffix : {".lora_A.weight", ".lora_B.weight"}) {
      if (name.ends_with(suffix)) {
        name = name.substr(0, name.size() - std::strlen(suffix)) + ".weight";
        p = &parts[name];
        (std::string(suffix) == ".lora_A.weight" ? p->a : p->b) = &t;
      }
    }
    if (!p) parts[name].whole = &t;
    if (!base.find(name).file) {
      throw Error(fmt::format("{}: {} changes {}, which {} does not have (an adapter for another base model?)",
                              adapter_path, t.name, name, base_dir),
                  t.name);
    }
  }
  for (const auto& [name, p] : parts) {
    if (!p.whole && (!p.a || !p.b))
      throw Error(fmt::format("{}: {} has lora_{} but not lora_{}", adapter_path, name, p.a ? "A" : "B", p.a ? "B" : "A"), name);
  }
  std::vector<checkpoint::SafetensorsEntry> entries;
  for (const std::string& name : base.names()) {
    const SafetensorsTensor& t = *base.find(name).tensor;
    entries.push_back({name, t.dtype, t.shape, t.end - t.begin});
  }
  checkpoint::HfDirectoryWriter writer(out_dir, entries, max_shard_bytes);
  MergeResult result;
  for (const std::string& name : base.names()) {
    const auto found = base.find(name);
    const SafetensorsTensor& t = *found.tensor;
    std::vector<float> w = read_floats(*found.file, t);
    found.file->release(t);
    if (const auto it = parts.find(name); it != parts.end()) {
      const AdapterParts& p = it->second;
      if (p.whole) {
        if (p.whole->shape != t.shape) {
          throw Error(fmt::format("{}: {} has shape [{}], the base's {} [{}]", adapter_path, p.whole->name,
                                  fmt::join(p.whole->shape, ", "), name, fmt::join(t.shape, ", ")),
                      p.whole->name);
        }
        w = read_floats(adapter, *p.whole);
        ++result.replaced;
      } else {
        const int64_t out = t.shape.size() == 2 ? t.shape[0] : -1, in = t.shape.size() == 2 ? t.shape[1] : -1;
        const int64_t r = p.a->shape.size() == 2 ? p.a->shape[0] : -1;
        if (out < 0 || p.a->shape != std::vector<int64_t>{r, in} || p.b->shape != std::vector<int64_t>{out, r}) {
          throw Error(fmt::format("{}: {} [{}] and {} [{}] do not fit the base's {} [{}] (an adapter for another base "
                                  "model?)",
                                  adapter_path, p.a->name, fmt::join(p.a->shape, ", "), p.b->name,
                                  fmt::join(p.b->shape, ", "), name, fmt::join(t.shape, ", ")),
                      p.a->name);
        }
        // PEFT's delta_weight: (lora_B @ lora_A) · scaling, in fp32, added to the weight.
        const std::vector<float> a = read_floats(adapter, *p.a), b = read_floats(adapter, *p.b);
        std::vector<float> delta(static_cast<size_t>(in));
        for (int64_t o = 0; o < out; ++o) {
          std::fill(delta.begin(), delta.end(), 0.0f);
          for (int64_t k = 0; k < r; ++k) {
            const float bk = b[static_cast<size_t>(o * r + k)];
            const float* ak = a.data() + k * in;
            for (int64_t i = 0; i < in; ++i) delta[static_cast<size_t>(i)] += bk * ak[i];
          }
          float* row = w.data() + o * in;
          for (int64_t i = 0; i < in; ++i) row[i] += delta[static_cast<size_t>(i)] * scaling;
        }
        ++result.merged;
      }
    }
    const std::vector<uint8_t> bytes = to_bytes(w, t.dtype);
    writer.append(bytes.data(), bytes.size());
    ++result.tensors;
  }
  writer.add_file("config.json", checkpoint::read_text_file((fs::path(base_dir) / "config.json").string()));
  for (const auto& name : hf_side_files()) {
    const fs::path from = fs::path(base_dir) / name;
    if (fs::exists(from)) writer.add_file(name, checkpoint::read_text_file(from.string()));
  }
  writer.finish();
  return result;
}

}  // namespace zero::llama
