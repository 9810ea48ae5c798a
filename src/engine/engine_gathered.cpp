// Engine::GatheredParameters and save_16bit_model: whole parameters, to read, change or write.
#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>

#include "checkpoint/files.h"
#include "checkpoint/safetensors.h"
#include "engine/engine_state.h"
#include "zero/error.h"

namespace zero {

Engine::GatheredParameters Engine::gathered_parameters(int modifier_rank) {
  if (modifier_rank >= state_->world.size()) {
    throw Error("gathered_parameters: modifier rank " + std::to_string(modifier_rank) +
                    " is not below the world size " + std::to_string(state_->world.size()),
                "modifier_rank", state_->world.rank());
  }
  return GatheredParameters(*this, modifier_rank);
}

void Engine::refuse_with_experts(const std::string& what) const {
  const State& s = *state_;
  if (!s.expert_data_comm) return;
  throw Error(what + " with expert parallelism (" + s.config.expert_parallel.key + " " +
                  std::to_string(s.expert_parallel->size()) + ") is not built yet: each rank holds only its experts",
              s.config.expert_parallel.key, s.world.rank());
}

Engine::GatheredParameters::GatheredParameters(Engine& engine, int modifier_rank)
    : engine_(engine), modifier_rank_(modifier_rank) {
  engine_.refuse_with_experts("gathered_parameters");
  engine_.gather_parameters();
}

Engine::GatheredParameters::~GatheredParameters() {
  State& s = *engine_.state_;
  const auto& buckets = s.flat->layout().buckets();
  for (size_t i = 0; i < buckets.size(); ++i) {
    const int b = static_cast<int>(i);
    if (modifier_rank_ >= 0) {
      // The modifier's whole buffer to everyone (raw collective writes: no version bumps), then
      // this rank's shard of it becomes its master and, at stage 3, its persistent shard.
      s.comm.broadcast(s.flat->buffer(b), modifier_rank_, {.async = false});
      s.partition->take_parameters(b);
    }
  }
  if (s.stage3) s.buckets->release_all();
}

}  // namespace zero

namespace zero {
namespace {

std::string safetensors_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "F32";
    case at::kHalf:
      return "F16";
    case at::kBFloat16:
      return "BF16";
    case at::kDouble:
      return "F64";
    default:
      return c10::toString(t);
  }
}

}  // namespace

std::vector<Engine::ParameterInfo> Engine::parameter_infos() const {
  const State& s = *state_;
  std::vector<ParameterInfo> out;
  for (const auto& bucket : s.flat->layout().buckets()) {
    // Expert parallelism: an experts' bucket stands for every expert-parallel rank's experts.
    const bool experts = s.expert_data_comm && bucket.replica_group == 1;
    const int holders = experts ? static_cast<int>(s.expert_view.names.size()) : 1;
    for (int e = 0; e < holders; ++e) {
      for (int p : bucket.params) {
        const at::Tensor& param = s.flat->params()[static_cast<size_t>(p)];
        out.push_back({experts ? s.expert_view.names[static_cast<size_t>(e)][static_cast<size_t>(p)]
                               : s.param_names[static_cast<size_t>(p)],
                       param.scalar_type(), param.sizes().vec(), static_cast<int64_t>(param.numel() * param.element_size())});
      }
    }
  }
  return out;
}

void Engine::visit_whole_parameters(const std::function<void(size_t, const at::Tensor&)>& fn,
                                    const std::function<void()>& finish, int on_rank, const std::string& what) {
  State& s = *state_;
  const int rank = s.world.rank();
  std::string error;
  auto attempt = [&](const std::function<void()>& f) {
    if (rank != on_rank || !error.empty()) return;
    try {
      f();
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  const auto& layout = s.flat->layout();
  size_t index = 0;
  for (size_t i = 0; i < layout.buckets().size(); ++i) {
    if (s.stage3) s.buckets->bucket(static_cast<int>(i)).gather();  // collective: every rank, even if one failed
    const std::vector<int>& params = layout.buckets()[i].params;
    if (s.expert_data_comm && layout.buckets()[i].replica_group == 1) {
      // Experts: each expert-parallel rank's in turn, broadcast over the expert-parallel groups.
      Communicator& group = s.expert_parallel->communicator();
      const at::Tensor& mine = s.flat->buffer(static_cast<int>(i));
      for (int e = 0; e < group.size(); ++e) {
        const at::Tensor held = e == group.rank() ? mine : at::empty_like(mine);
        group.broadcast(held, e, {.async = false});
        attempt([&] {
          size_t k = index;
          for (int p : params) fn(k++, s.flat->view_of(held, p).contiguous());
        });
        index += params.size();
      }
    } else {
      attempt([&] {
        size_t k = index;
        for (int p : params) fn(k++, s.flat->params()[static_cast<size_t>(p)].contiguous());
      });
      index += params.size();
    }
    if (s.stage3) s.buckets->release_all();
  }
  if (finish) attempt(finish);
  agree(s.comm, error, rank, what);
}

bool Engine::save_16bit_model(const std::string& dir, const std::string& file) {
  State& s = *state_;
  const int rank = s.world.rank();
  if (s.stage3 && !s.config.zero.stage3_gather_16bit_weights_on_model_save) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "zerocpp: warning: save_16bit_model wrote nothing: "
                   "zero_optimization.stage3_gather_16bit_weights_on_model_save is false\n");
    }
    return false;
  }
  std::vector<checkpoint::SafetensorsEntry> entries;
  for (const auto& p : parameter_infos())
    entries.push_back({p.name, safetensors_dtype(p.dtype), p.shape, static_cast<uint64_t>(p.bytes)});
  // The writer writes FILE.partial and renames it on finish: a failed save leaves nothing behind.
  const std::filesystem::path path = std::filesystem::path(dir) / file;
  std::unique_ptr<checkpoint::SafetensorsWriter> writer;
  auto open = [&] {  // on rank 0, at its first parameter (or at the end when there is none)
    if (writer) return;
    std::filesystem::create_directories(dir);
    writer = std::make_unique<checkpoint::SafetensorsWriter>(
        path.string(), entries, std::map<std::string, std::string>{{"format", "pt"}, {"producer", "zerocpp"}});
  };
  visit_whole_parameters(
      [&](size_t, const at::Tensor& param) {
        open();
        const at::Tensor bytes = param.cpu();  // (from a GPU: a host copy of one parameter)
        writer->append(bytes.data_ptr(), static_cast<uint64_t>(bytes.nbytes()));
      },
      [&] {
        open();
        writer->finish();
        checkpoint::fsync_directory(dir);
      },
      0, "save_16bit_model");
  return true;
}

}  // namespace zero
