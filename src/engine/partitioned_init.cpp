// zero::Init (include/zero/init.h): a unit built inside the scope keeps only this rank's shard.
#include "zero/init.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <xxhash.h>

#include <cstring>
#include <memory>
#include <optional>
#include <unordered_set>

#include "engine/flat_params.h"
#include "engine/partitioned_init.h"
#include "layout/bucket_layout.h"
#include "offload/swap_file.h"
#include "zero/allocator.h"
#include "zero/error.h"
#include "zero/unit.h"

namespace zero {
namespace {

thread_local Init* active = nullptr;

// A tensor of `numel` elements whose storage holds no bytes (a released bucket, as
// FlatParams::release leaves one), with `params` made views of it at `offsets`, all without
// allocating it. Views need the storage to be big enough, so its size is claimed while they are
// made, then set back to 0: nothing reads or writes it until FlatParams::materialize.
at::Tensor released_buffer(at::ScalarType dtype, int64_t numel, const std::vector<at::Tensor>& params,
                           const std::vector<int64_t>& offsets) {
  const auto bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, c10::GetCPUAllocator(), /*resizable=*/true);
  storage.unsafeGetStorageImpl()->set_nbytes(bytes);
  at::Tensor buffer = at::empty({0}, at::TensorOptions().dtype(dtype)).set_(storage, 0, {numel}, {1});
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor p = params[i];  // the same tensor object: set_data keeps it (and its autograd meta)
    p.set_data(buffer.narrow(0, offsets[i], p.numel()).view(p.sizes()));
  }
  storage.unsafeGetStorageImpl()->set_nbytes(0);
  return buffer;
}

}  // namespace

// offload_param.device "nvme": the folder the units' shards are spilled to while the model is
// built, and how.
struct InitSpill {
  std::shared_ptr<offload::SwapFolder> folder;
  offload::AioOptions aio;
  int files = 0;
};

namespace {

// One spilled shard: its file, removed before its folder (members go in reverse order).
struct SpilledShard {
  std::shared_ptr<offload::SwapFolder> folder;
  std::unique_ptr<offload::SwapFile> file;
  int64_t numel = 0, aligned_bytes = 0;
  at::ScalarType dtype = at::kFloat;
};

// `shard` lies in `pages` (an aligned buffer of its own).
std::function<at::Tensor()> spill(InitSpill& spill, const at::Tensor& shard, const offload::AlignedBuffer& pages) {
  auto s = std::make_shared<SpilledShard>();
  s->folder = spill.folder;
  s->numel = shard.numel();
  s->dtype = shard.scalar_type();
  s->aligned_bytes = std::max(offload::kIoAlignment, offload::io_align_up(static_cast<int64_t>(shard.nbytes())));
  s->file = std::make_unique<offload::SwapFile>(spill.folder->path() + "/init-unit" + std::to_string(spill.files++) + ".swap",
                                                s->aligned_bytes, spill.aio);
  s->file->wait(s->file->write(0, pages.data(), s->aligned_bytes));
  return [s] {
    offload::AlignedBuffer staging(s->aligned_bytes);
    s->file->wait(s->file->read(0, staging.data(), s->aligned_bytes));
    at::Tensor out = at::empty({s->numel}, at::TensorOptions().dtype(s->dtype));
    std::memcpy(out.data_ptr(), staging.data(), out.nbytes());
    return out;
  };
}

}  // namespace

struct InitAccess {
  static void partition(Init& init, UnitBase& unit) {
    const ZeroConfig& z = init.config_.zero;
    const int world_size = init.world_.size(), rank = init.world_.rank();
    std::vector<at::Tensor> trainable;
    std::unordered_set<const void*> seen;
    for (const auto& p : unit.parameters()) {
      if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
      if (p.numel() > 0 && p.storage().nbytes() == 0) {
        throw Error("zero::Init: a unit inside another unit (units may not nest)", "zero::Init", rank);
      }
      trainable.push_back(p);
    }
    if (trainable.empty()) return;
    const at::ScalarType dtype = engine::training_dtype(init.config_, trainable.front().scalar_type());
    // Bucket order is reverse registration order (FlatParams); small parameters stay whole.
    std::vector<at::Tensor> sharded;
    for (auto it = trainable.rbegin(); it != trainable.rend(); ++it) {
      at::Tensor& p = *it;
      const int64_t n = p.numel();
      if (engine::stays_whole(z, init.persisted_, n)) {
        if (p.scalar_type() != dtype) p.set_data(p.detach().to(dtype));
        continue;
      }
      sharded.push_back(p);
    }
    if (sharded.empty()) return;
    // The bucket the engine will lay out for this unit: one bucket, the same padding and offsets.
    std::vector<int64_t> numels;
    for (const auto& p : sharded) numels.push_back(p.numel());
    const layout::BucketLayout layout(numels, world_size, engine::alignment_for(dtype), engine::kWholeGroupBucket);
    const layout::Bucket& bucket = layout.buckets().front();
    PartitionedUnit out;
    out.world_size = world_size;
    // Spilled: the shard is filled in pages of its own, written, and unmapped.
    std::optional<offload::AlignedBuffer> pages;
    if (init.spill_) {
      pages.emplace(static_cast<int64_t>(bucket.shard * c10::elementSize(dtype)));
      out.shard = at::from_blob(pages->data(), {bucket.shard}, at::TensorOptions().dtype(dtype));  // zeros
    } else {
      out.shard = at::zeros({bucket.shard}, at::TensorOptions().dtype(dtype));
    }
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(), &XXH3_freeState);
    XXH3_64bits_reset(hash.get());
    std::vector<int64_t> offsets;
    for (size_t i = 0; i < sharded.size(); ++i) {
      const at::Tensor v = sharded[i].detach().to(dtype).contiguous().reshape(-1);
      XXH3_64bits_update(hash.get(), v.data_ptr(), v.nbytes());
      offsets.push_back(layout.slot(static_cast<int>(i)).offset);
      if (auto f = layout.fragment(static_cast<int>(i), rank)) {
        const int64_t length = f->param_end - f->param_begin;
        out.shard.narrow(0, f->owned_offset, length).copy_(v.narrow(0, f->param_begin, length));
      }
    }
    out.checksum = XXH3_64bits_digest(hash.get());
    if (init.spill_) {
      out.spilled = spill(*init.spill_, out.shard, *pages);
      out.shard = at::Tensor();
    }
    out.buffer = released_buffer(dtype, bucket.padded, sharded, offsets);
    out.params = std::move(sharded);
    unit.set_partitioned(std::move(out));
    // The unit's whole parameters are gone: their pages go back before the next unit is built
    // (small objects that outlive them would otherwise pin the holes they leave).
    release_freed_memory();
  }
};

Init::Init(const Config& config, World& world) : config_(config), world_(world) {
  if (active != nullptr) throw Error("zero::Init scopes do not nest", "zero::Init", world.rank());
  if (config.zero.stage == 3) active = this;
  const OffloadParamConfig& param = config.zero.offload_param;
  if (config.zero.stage == 3 && param.device == OffloadDevice::kNvme) {
    offload::check_swap_dir(param.nvme_path, 0, "zero_optimization.offload_param.nvme_path");
    spill_ = std::make_shared<InitSpill>();
    spill_->folder = std::make_shared<offload::SwapFolder>(param.nvme_path, world.rank());
    spill_->aio = offload::aio_options(config);
  }
}

Init::~Init() {
  if (active == this) active = nullptr;
}

namespace detail {
void partition_if_initializing(UnitBase& unit) {
  if (active != nullptr) InitAccess::partition(*active, unit);
}
}  // namespace detail

}  // namespace zero

namespace zero::engine {

at::ScalarType training_dtype(const Config& config, at::ScalarType declared) {
  if (config.bf16) return at::kBFloat16;
  if (config.fp16.enabled) return at::kHalf;
  return declared;
}

bool stays_whole(const ZeroConfig& zero, int64_t& persisted, int64_t numel) {
  if (numel > zero.stage3_param_persistence_threshold || persisted + numel > zero.stage3_model_persistence_threshold) {
    return false;
  }
  persisted += numel;
  return true;
}

PartitionedUnits find_partitioned_units(torch::nn::Module& model) {
  PartitionedUnits found;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const auto* unit = dynamic_cast<const UnitBase*>(item.value().get());
    if (unit == nullptr || !unit->partitioned()) continue;
    found.units.emplace_back(item.key(), unit);
    for (const auto& p : unit->partitioned()->params) found.params.insert(p.unsafeGetTensorImpl());
  }
  return found;
}

void verify_partitioned_units(const PartitionedUnits& found, Communicator& comm, at::ScalarType dtype) {
  const int rank = comm.rank();
  for (const auto& [name, unit] : found.units) {
    const PartitionedUnit& p = *unit->partitioned();
    if (p.world_size != comm.size() || p.buffer.scalar_type() != dtype) {
      throw Error("unit " + name + " was built under zero::Init for " + std::to_string(p.world_size) + " ranks in " +
                      c10::toString(p.buffer.scalar_type()) + ", but the engine trains on " +
                      std::to_string(comm.size()) + " in " + c10::toString(dtype) +
                      ": build the model with the engine's config and world",
                  "zero::Init", rank);
    }
  }
  if (found.units.empty() || comm.size() == 1) return;
  // Max of each checksum and of its complement: a unit is the same everywhere when max == min.
  const auto n = static_cast<int64_t>(found.units.size());
  at::Tensor extremes = at::empty({2, n}, at::kLong);
  for (int64_t u = 0; u < n; ++u) {
    const auto h = static_cast<int64_t>(found.units[static_cast<size_t>(u)].second->partitioned()->checksum);
    extremes[0][u] = h;
    extremes[1][u] = ~h;
  }
  comm.all_reduce(extremes, ReduceOp::kMax, {.async = false});
  for (int64_t u = 0; u < n; ++u) {
    if (extremes[0][u].item<int64_t>() == ~extremes[1][u].item<int64_t>()) continue;
    // Rare path: which ranks differ from rank 0.
    const at::Tensor mine = extremes.new_full({1}, static_cast<int64_t>(
                                                       found.units[static_cast<size_t>(u)].second->partitioned()->checksum));
    at::Tensor all = at::empty({comm.size()}, at::kLong);
    comm.all_gather(mine, all, {.async = false});
    std::string ranks;
    for (int r = 1; r < comm.size(); ++r) {
      if (all[r].item<int64_t>() != all[0].item<int64_t>()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    }
    throw Error("zero::Init: ranks built unit " + found.units[static_cast<size_t>(u)].first +
                    " with different values (rank " + ranks + " differs from rank 0): every rank must build the "
                    "model from the same seed, in the same order",
                "zero::Init", rank);
  }
}

}  // namespace zero::engine
