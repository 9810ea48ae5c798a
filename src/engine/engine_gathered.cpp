// Engine::GatheredParameters and save_16bit_model: whole parameters, to read, change or write.
#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>

#include "checkpoint/files.h"
#include "checkpoint/safetensors.h"
#include "engine/agree.h"
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

Engine::GatheredParameters::GatheredParameters(Engine& engine, int modifier_rank)
    : engine_(engine), modifier_rank_(modifier_rank) {
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
  if (s.stage3) s.stage3->release_all();
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
  // Bucket by bucket (a stage-3 unit at a time), each bucket's parameters in their slot order.
  const auto& layout = s.flat->layout();
  std::vector<checkpoint::SafetensorsEntry> entries;
  for (const auto& bucket : layout.buckets()) {
    for (int p : bucket.params) {
      const at::Tensor& param = s.flat->params()[static_cast<size_t>(p)];
      entries.push_back({s.param_names[static_cast<size_t>(p)], safetensors_dtype(param.scalar_type()),
                         param.sizes().vec(), static_cast<uint64_t>(param.nbytes())});
    }
  }
  const std::filesystem::path path = std::filesystem::path(dir) / file;
  const std::string partial = path.string() + ".partial";
  std::unique_ptr<checkpoint::SafetensorsWriter> writer;
  std::string error;
  auto attempt = [&](const std::function<void()>& fn) {
    if (rank != 0 || !error.empty()) return;
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  attempt([&] {
    std::filesystem::create_directories(dir);
    writer = std::make_unique<checkpoint::SafetensorsWriter>(
        partial, entries, std::map<std::string, std::string>{{"format", "pt"}, {"producer", "zerocpp"}});
  });
  for (size_t i = 0; i < layout.buckets().size(); ++i) {
    const int b = static_cast<int>(i);
    if (s.stage3) s.stage3->gather(b);  // collective: every rank, even if rank 0 failed
    attempt([&] {
      for (int p : layout.buckets()[i].params) {
        const at::Tensor param = s.flat->params()[static_cast<size_t>(p)].contiguous();
        writer->append(param.data_ptr(), static_cast<uint64_t>(param.nbytes()));
      }
    });
    if (s.stage3) s.stage3->release_all();
  }
  attempt([&] {
    writer->finish();
    std::filesystem::rename(partial, path);
    checkpoint::fsync_directory(dir);
  });
  engine::agree(s.comm, error, rank, "save_16bit_model");
  return true;
}

}  // namespace zero
