#include "models/llama/hf_model_dir.h"

#include "models/llama/llama_tensor_parallel.h"
#include "zero/tensor_parallel.h"

#include <ATen/ATen.h>

#include <algorithm>

#include <filesystem>
#include <map>
#include <set>

#include "checkpoint/files.h"
#include "checkpoint/hf_directory_writer.h"
#include "zero/engine.h"
#include "zero/error.h"
#include "zero/world.h"
#include "util/json_from_file.h"

namespace zero::llama {
namespace fs = std::filesystem;
namespace {

class FileWeights : public WeightSource {
 public:
  explicit FileWeights(const HfModel& model) : model_(model) {}
  at::Tensor get(const HfTensor& t, at::ScalarType dtype) override {
    const auto found = model_.weights->find(t.name);
    if (!found.file) throw Error(model_.dir + ": no tensor " + t.name, t.name);  // open_hf_model checked
    const at::Tensor mapped =
        at::from_blob(const_cast<void*>(found.file->data(*found.tensor)), t.shape,
                      at::TensorOptions().dtype(scalar_type_of(found.tensor->dtype)));
    at::Tensor out = mapped.to(dtype, /*non_blocking=*/false, /*copy=*/true);
    found.file->release(*found.tensor);
    return out;
  }
  // Only the slice's bytes are copied out of the mapping (a row slice is one contiguous range).
  at::Tensor get_slice(const HfTensor& t, at::ScalarType dtype, int64_t dim, int64_t start, int64_t length) override {
    const auto found = model_.weights->find(t.name);
    if (!found.file) throw Error(model_.dir + ": no tensor " + t.name, t.name);
    const at::Tensor mapped =
        at::from_blob(const_cast<void*>(found.file->data(*found.tensor)), t.shape,
                      at::TensorOptions().dtype(scalar_type_of(found.tensor->dtype)));
    at::Tensor out = mapped.narrow(dim, start, length).to(dtype, /*non_blocking=*/false, /*copy=*/true).contiguous();
    found.file->release(*found.tensor);
    return out;
  }

 private:
  const HfModel& model_;
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::string safetensors_dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "F32";
    case at::kBFloat16:
      return "BF16";
    case at::kHalf:
      return "F16";
    default:
      throw Error(std::string("no Hugging Face export of dtype ") + c10::toString(dtype));
  }
}

std::string torch_dtype_name(const std::string& dtype) {
  return dtype == "BF16" ? "bfloat16" : dtype == "F16" ? "float16" : "float32";
}

at::ScalarType scalar_type_of(const std::string& dtype) {
  if (dtype == "F32") return at::kFloat;
  if (dtype == "BF16") return at::kBFloat16;
  if (dtype == "F16") return at::kHalf;
  throw Error("dtype " + dtype + " is not a weight dtype zerocpp reads (F32, BF16, F16)", dtype);
}

bool ignored_hf_tensor(const LlamaConfig& config, const std::string& name) {
  return name.ends_with(".rotary_emb.inv_freq") || (config.tie_word_embeddings && name == "lm_head.weight");
}

HfModel open_hf_model(const std::string& dir) {
  HfModel m;
  m.dir = dir;
  if (!fs::is_directory(dir)) throw Error(dir + ": not a directory (a Hugging Face model directory is expected)", dir);
  const std::string config_path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(config_path)) throw Error(config_path + ": missing (every Hugging Face model directory has one)", config_path);
  try {
    m.config_json = parse_json_from<nlohmann::ordered_json>(checkpoint::read_text_file(config_path), config_path);
  } catch (const nlohmann::json::exception& e) {
    throw Error(config_path + ": not JSON (" + e.what() + ")", config_path);
  }
  m.config = parse_llama_config(nlohmann::json::parse(m.config_json.dump()), config_path);
  m.weights = std::make_unique<checkpoint::SafetensorsModel>(dir);
  // Every tensor the config implies, with its shape and a weight dtype; nothing else.
  std::set<std::string> expected;
  for (const HfTensor& t : llama_tensors(m.config)) {
    expected.insert(t.name);
    const auto found = m.weights->find(t.name);
    if (!found.file) {
      throw Error(dir + ": tensor " + t.name + " is missing (config.json implies it" +
                      (t.name == "lm_head.weight" ? ": tie_word_embeddings is false" : "") + ")",
                  t.name);
    }
    const auto& f = *found.tensor;
    if (f.shape != t.shape) {
      throw Error(found.file->path() + ": tensor " + t.name + " has shape " + shape_text(f.shape) +
                      ", config.json implies " + shape_text(t.shape),
                  t.name);
    }
    if (f.dtype != "F32" && f.dtype != "BF16" && f.dtype != "F16") {
      throw Error(found.file->path() + ": tensor " + t.name + " has dtype " + f.dtype +
                      " (weights must be F32, BF16 or F16)",
                  t.name);
    }
    if (m.weights_dtype.empty()) m.weights_dtype = f.dtype;
  }
  for (const std::string& name : m.weights->names()) {
    if (expected.contains(name) || ignored_hf_tensor(m.config, name)) continue;
    throw Error(m.weights->find(name).file->path() + ": unexpected tensor " + name + " (not part of a " +
                    m.config.architecture + " with this config.json)",
                name);
  }
  return m;
}

std::unique_ptr<WeightSource> file_weights(const HfModel& model) { return std::make_unique<FileWeights>(model); }

void write_hf_model(Engine& engine, const LlamaForCausalLM& model, const nlohmann::ordered_json& config_json,
                    const HfExportOptions& options, World& world) {
  // The engine's parameters under Hugging Face's names; a tied lm_head is the embedding, stored once.
  // Under tensor parallelism each member holds slices: the files hold the whole tensors, joined
  // on the first member from every member's slice (llama.h's split, slice_range's sizes).
  const TensorParallelPlace& place = model.place;
  const std::vector<HfTensor> tensors = llama_tensors(model.config);
  const std::vector<Engine::ParameterInfo> params = engine.parameter_infos();
  std::vector<checkpoint::SafetensorsEntry> entries;
  std::vector<int> split_dims;  // per parameter: the dimension its slices join along, or -1
  std::string dtype;
  for (const auto& p : params) {
    const std::string d = safetensors_dtype_name(p.dtype), name = hf_name(p.name);
    if (dtype.empty()) dtype = d;
    std::vector<int64_t> shape = p.shape;
    uint64_t bytes = static_cast<uint64_t>(p.bytes);
    const int dim = place.group ? split_dim(split_of(name)) : -1;
    if (dim >= 0) {
      const auto whole = std::find_if(tensors.begin(), tensors.end(), [&](const HfTensor& t) { return t.name == name; });
      if (whole == tensors.end()) throw Error("the engine holds a parameter " + name + " that is not part of the Hugging Face model", name);
      shape = whole->shape;
      bytes = bytes / static_cast<uint64_t>(p.shape[static_cast<size_t>(dim)]) * static_cast<uint64_t>(shape[static_cast<size_t>(dim)]);
    }
    split_dims.push_back(dim);
    entries.push_back({name, d, shape, bytes});
  }
  // Pipeline parallelism: every stage's tensors, in stage order (each stage computes its own list;
  // its ranks all hold the same, so every pipeline group exchanges the same lists).
  World* pipeline = options.pipeline && options.pipeline->size() > 1 ? options.pipeline : nullptr;
  const int stage = pipeline ? pipeline->rank() : 0, stages = pipeline ? pipeline->size() : 1;
  std::vector<std::vector<checkpoint::SafetensorsEntry>> staged(static_cast<size_t>(stages));
  staged[static_cast<size_t>(stage)] = entries;
  for (int s = 0; pipeline && s < stages; ++s) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : staged[static_cast<size_t>(s)]) list.push_back({e.name, e.dtype, e.shape, e.bytes});
    std::string text = list.dump();
    at::Tensor length = at::full({1}, static_cast<int64_t>(text.size()), at::kLong);
    pipeline->communicator().broadcast(length, s, {.async = false});
    at::Tensor bytes = at::zeros({length.item<int64_t>()}, at::kByte);
    if (s == stage) std::memcpy(bytes.data_ptr(), text.data(), text.size());
    pipeline->communicator().broadcast(bytes, s, {.async = false});
    if (s == stage) continue;
    staged[static_cast<size_t>(s)].clear();
    const auto received = nlohmann::json::parse(
        std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(length.item<int64_t>())));
    for (const auto& e : received)
      staged[static_cast<size_t>(s)].push_back({e[0].get<std::string>(), e[1].get<std::string>(),
                                                e[2].get<std::vector<int64_t>>(), e[3].get<uint64_t>()});
  }
  std::vector<checkpoint::SafetensorsEntry> all;
  for (const auto& list : staged) all.insert(all.end(), list.begin(), list.end());
  // The first stage's first tensor-parallel member writes, on the data-parallel rank
  // visit_whole_parameters calls back on (0). Its write errors are kept, not thrown, so that the
  // other members' slices (and stages' tensors) still meet it in every broadcast; all ranks learn
  // of them at the end.
  const bool writes = place.rank == 0 && stage == 0 && world.rank() == 0;
  std::string write_error;
  // Every tensor of the model, each once (tied weights are one parameter to the engine; a last
  // stage's copy of a tied embedding is not one).
  std::set<std::string> expected;
  for (const HfTensor& t : llama_tensors(model.config)) expected.insert(t.name);
  for (const auto& e : all) {
    if (!expected.erase(e.name))
      throw Error("the engine holds a parameter " + e.name + " that is not part of the Hugging Face model", e.name);
  }
  if (!expected.empty()) {
    throw Error("the engine does not train " + *expected.begin() + " (frozen parameters are not exported yet)",
                *expected.begin());
  }
  // Tensors go into the files in the order the engine makes them whole (a stage-3 unit at a
  // time), not in transformers' order: waiting for the first layer would mean holding the others.
  // transformers finds tensors by name, so the order within and across files does not matter.
  std::unique_ptr<checkpoint::HfDirectoryWriter> writer;
  auto open = [&] {
    if (!writer) writer = std::make_unique<checkpoint::HfDirectoryWriter>(options.out_dir, all, options.max_shard_bytes);
  };
  auto append = [&](const at::Tensor& whole) {
    if (!writes || !write_error.empty()) return;
    try {
      open();
      writer->append(whole.data_ptr(), static_cast<uint64_t>(whole.nbytes()));
    } catch (const std::exception& e) {
      write_error = e.what();
    }
  };
  auto finish_files = [&] {
    if (!writes || !write_error.empty()) return;
    try {
      open();
      writer->add_file("config.json", export_llama_config(config_json, torch_dtype_name(dtype)).dump(2) + "\n");
      if (!options.source_dir.empty()) {
        for (const auto& name : hf_side_files()) {
          const fs::path from = fs::path(options.source_dir) / name;
          if (fs::exists(from)) writer->add_file(name, checkpoint::read_text_file(from.string()));
        }
      }
      writer->finish();
    } catch (const std::exception& e) {
      write_error = e.what();
    }
  };
  // The ranks that move a later stage's tensors to the first: one per stage, the first
  // tensor-parallel member on data-parallel rank 0 (the writer among them).
  const bool relays = pipeline && place.rank == 0 && world.rank() == 0;
  for (int s = 0; s < stages; ++s) {
    if (s == stage) {
      engine.visit_whole_parameters(
          [&](size_t i, const at::Tensor& value) {
            at::Tensor whole = value;
            if (const int dim = split_dims[i]; dim >= 0) {
              // Every member's slice, broadcast by its holder, into the whole tensor.
              const std::vector<int64_t>& shape = entries[i].shape;
              whole = at::empty(shape, value.options());
              for (int t = 0; t < place.size; ++t) {
                const SliceRange r = slice_range(shape[static_cast<size_t>(dim)], t, place.size);
                std::vector<int64_t> slice_shape = shape;
                slice_shape[static_cast<size_t>(dim)] = r.length;
                at::Tensor slice = t == place.rank ? value.contiguous() : at::empty(slice_shape, value.options());
                place.group->broadcast(slice, t, {.async = false});
                whole.narrow(dim, r.start, r.length).copy_(slice);
              }
            }
            if (relays && s > 0) pipeline->communicator().broadcast(whole.contiguous(), s, {.async = false});
            append(whole);
          },
          [] {}, 0, "export to " + options.out_dir);
    } else if (relays && s > 0) {
      // A later stage's tensors to the first (every stage's relay joins the broadcast), in the
      // order that stage's engine visits them (its entries').
      for (const auto& e : staged[static_cast<size_t>(s)]) {
        at::Tensor whole = at::empty(e.shape, at::TensorOptions().dtype(params.front().dtype));
        pipeline->communicator().broadcast(whole, s, {.async = false});
        append(whole);
      }
    }
  }
  finish_files();
  // Every rank learns of a write error: over its data-parallel group, then its tensor-parallel
  // and pipeline ones.
  at::Tensor failed = at::full({1}, write_error.empty() ? 0 : 1, at::kInt);
  world.communicator().all_reduce(failed, ReduceOp::kMax, {.async = false});
  if (place.group) place.group->all_reduce(failed, ReduceOp::kMax, {.async = false});
  if (pipeline) pipeline->communicator().all_reduce(failed, ReduceOp::kMax, {.async = false});
  if (failed.item<int>() != 0) {
    throw Error(write_error.empty() ? "export to " + options.out_dir + " failed on the writing rank" : write_error,
                options.out_dir);
  }
}


}  // namespace zero::llama
