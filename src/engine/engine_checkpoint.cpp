// Engine::save_checkpoint / load_checkpoint (docs/checkpoints.md).
//
// DIR/TAG/manifest.json describes everything; DIR/TAG/rank<R>.bin holds rank R's owned fp32 flat
// buffers, one after the other: the master weights, then each optimizer state tensor. The
// manifest lists, per file, which element range of which named parameter sits where, so any
// layout (world size, stage, bucket size) can read any other: each rank reads the ranges of the
// parameters it owns now, from whichever files hold them.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <climits>
#include <csignal>
#include <cstring>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/files.h"
#include "checkpoint/parts.h"
#include "checkpoint/reader.h"
#include "engine/engine_state.h"
#include "zero/error.h"

namespace zero {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using checkpoint::check_tag;
using checkpoint::rng_file_name;
using checkpoint::shard_file_name;
using checkpoint::tensor_parallel_root;

at::Tensor cpu_rng_state() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

// This rank's saved generator state (verified), or nothing when the checkpoint has none for it
// or was saved at another world size (each rank's stream then has no counterpart).
std::string saved_cpu_rng_state(const checkpoint::CheckpointReader& reader, int rank, int world_size) {
  if (reader.manifest().value("world_size", 0) != world_size) return "";
  return reader.rng_state(rank);
}

// Collective error agreement over the data-parallel group and then the tensor-parallel group
// (when there is one), so that every rank of the world learns of an error on any, and throws.
// Over the data-parallel group, then the tensor-parallel and pipeline groups (null: none): a
// minimum over each dimension of the grid in turn is the minimum over all of it.
void agree_everywhere(Communicator& data_parallel, World* tensor_parallel, World* pipeline, const std::string& error,
                      int rank, const std::string& what) {
  if (!tensor_parallel && !pipeline) return agree(data_parallel, error, rank, what);
  // The first failing rank (by its data-parallel rank) as zero::agree names it.
  at::Tensor first = at::full({1}, error.empty() ? INT_MAX : rank, at::kInt);
  data_parallel.all_reduce(first, ReduceOp::kMin, {.async = false});
  if (tensor_parallel) tensor_parallel->communicator().all_reduce(first, ReduceOp::kMin, {.async = false});
  if (pipeline) pipeline->communicator().all_reduce(first, ReduceOp::kMin, {.async = false});
  const int failed = first.item<int>();
  if (failed == INT_MAX) return;
  if (!error.empty()) throw Error(error, what, rank);
  throw Error(what + " failed on data-parallel rank " + std::to_string(failed) +
                  " of another tensor-parallel member or pipeline stage (its error is printed there)",
              what, rank);
}

void set_cpu_rng_state(const std::string& bytes) {
  if (bytes.empty()) return;
  at::Tensor state = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::memcpy(state.data_ptr(), bytes.data(), bytes.size());
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// Test hook for the crash-safety test (tests/e2e/checkpoint_e2e.sh): ZERO_TEST_KILL_IN_SAVE=R:N
// makes rank R kill itself with SIGKILL in the middle of writing its file in its N-th save.
bool crash_requested(int rank) {
  static int saves = 0;
  ++saves;
  const char* spec = std::getenv("ZERO_TEST_KILL_IN_SAVE");
  int r = -1, n = -1;
  return spec != nullptr && std::sscanf(spec, "%d:%d", &r, &n) == 2 && r == rank && n == saves;
}

}  // namespace

std::string Engine::save_checkpoint(const std::string& dir, const std::string& requested_tag,
                                    const std::string& client_state) {
  State& s = *state_;
  const std::string tag = requested_tag.empty() ? "global_step" + std::to_string(s.global_steps) : requested_tag;
  check_tag(tag);
  if (s.pipeline) {
    // Pipeline parallelism: each stage saves its parameters as a checkpoint of its own (plain or
    // in tensor-parallel parts), DIR/pipeline_<s>_of_<p>/...; DIR/latest names the tag once
    // every stage's is complete.
    std::string error;
    try {
      save_stage(checkpoint::pipeline_root(dir, s.pipeline->rank(), s.pipeline->size()), tag, client_state);
    } catch (const std::exception& e) {
      error = e.what();  // its stage agreed on it
    }
    agree(s.pipeline->communicator(), error, s.pipeline->rank(), "save_checkpoint");
    if (s.world.process_rank() == 0) {
      try {
        checkpoint::write_file_atomically((fs::path(dir) / "latest").string(), tag + "\n");
      } catch (const std::exception& e) {
        error = dir + ": cannot complete checkpoint " + tag + ": " + e.what();
      }
    }
    agree_everywhere(s.comm, s.tensor_parallel, s.pipeline, error, s.world.rank(), "save_checkpoint");
    return tag;
  }
  save_stage(dir, tag, client_state);
  return tag;
}

void Engine::save_stage(const std::string& dir, const std::string& tag, const std::string& client_state) {
  State& s = *state_;
  if (!s.tensor_parallel) {
    save_partitions(dir, tag, client_state, "");
    return;
  }
  // Tensor parallelism: each member's data-parallel group saves its slices into a checkpoint of
  // its own, DIR/tensor_parallel_<t>_of_<n>/TAG, whose manifest says where each slice sits in the
  // whole parameter; DIR/latest names the tag once every part is complete.
  World& group = *s.tensor_parallel;
  json slices = json::array();
  for (const auto& slice : s.slices) slices.push_back({slice.dim, slice.start, slice.whole});
  const json block = {{"size", group.size()}, {"rank", group.rank()}, {"slices", slices}};
  std::string error;
  try {
    save_partitions(tensor_parallel_root(dir, group.rank(), group.size()), tag, client_state, block.dump());
  } catch (const std::exception& e) {
    error = e.what();  // its data-parallel group agreed on it
  }
  agree(group.communicator(), error, group.rank(), "save_checkpoint");
  if (group.rank() == 0 && s.world.rank() == 0) {
    try {
      checkpoint::write_file_atomically((fs::path(dir) / "latest").string(), tag + "\n");
    } catch (const std::exception& e) {
      error = dir + ": cannot complete checkpoint " + tag + ": " + e.what();
    }
  }
  agree_everywhere(s.comm, &group, nullptr, error, s.world.rank(), "save_checkpoint");
}

void Engine::save_partitions(const std::string& dir, const std::string& tag, const std::string& client_state,
                             const std::string& slices) {
  State& s = *state_;
  const int rank = s.world.rank();
  const json client = json::parse(client_state, nullptr, false);
  if (client.is_discarded() || !client.is_object())
    throw Error("save_checkpoint: client_state is not a JSON object", "client_state", rank);
  const fs::path root(dir), partial = root / (tag + ".partial"), final_dir = root / tag;

  std::string error;
  if (rank == 0) {
    try {
      fs::create_directories(root);
      fs::remove_all(partial);  // left by an interrupted save
      fs::create_directories(partial);
    } catch (const std::exception& e) {
      error = dir + ": cannot prepare the checkpoint directory: " + e.what();
    }
  }
  agree(s.comm, error, rank, "save_checkpoint");

  // Stage 0: every rank holds the same state, rank 0 writes it; with expert parallelism the first
  // rank of each expert-data-parallel group too, for its experts. Partitioned, every rank writes
  // its shards.
  const layout::BucketLayout& layout = s.flat->layout();
  const bool experts = s.expert_data_comm != nullptr;
  // Whether world rank r lists the fragments of replica group g's buckets: its rank in the group
  // names one of their shards (with one partition, only the group's first rank).
  auto rank_in_group = [&](int r, int g) { return g == 0 ? r : s.expert_view.expert_data_rank_of[static_cast<size_t>(r)]; };
  auto lists = [&](int r, int g) { return rank_in_group(r, g) < layout.partitions_of(g); };
  auto writes = [&](int r) {
    for (int g = 0; g < layout.replica_groups(); ++g)
      if (lists(r, g)) return true;
    return false;
  };
  const std::vector<std::string> kinds = s.partition->state_names();
  checkpoint::FileDigest digest, rng_digest;
  try {
    if (writes(rank)) {
      checkpoint::HashingWriter writer((partial / shard_file_name(rank)).string());
      const bool crash = crash_requested(rank);
      for (size_t k = 0; k < kinds.size(); ++k) {  // in memory or streamed from NVMe
        s.partition->write_state(static_cast<int>(k), [&](const void* data, int64_t bytes) {
          writer.write(data, static_cast<size_t>(bytes));
        });
        if (crash) std::raise(SIGKILL);  // half-way through this rank's file
      }
      // A 16-bit model's own weights, after the fp32 buffers: what it computes with, readable
      // without rounding the masters again (they are exactly these, rounded).
      if (s.flat->dtype() != at::kFloat) {
        const at::Tensor sixteen = s.partition->parameters16().cpu();
        writer.write(sixteen.data_ptr(), sixteen.nbytes());
      }
      digest = writer.finish();
    }
    // Every rank's CPU random state (dropout and the like differ per rank), in a small file.
    const at::Tensor rng = cpu_rng_state();
    checkpoint::HashingWriter writer((partial / rng_file_name(rank)).string());
    writer.write(rng.data_ptr(), rng.nbytes());
    rng_digest = writer.finish();
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(s.comm, error, rank, "save_checkpoint");

  // Per rank: shard file bytes and checksum, random-state file bytes and checksum.
  at::Tensor mine = at::tensor({static_cast<int64_t>(digest.bytes), static_cast<int64_t>(digest.xxh3),
                                static_cast<int64_t>(rng_digest.bytes), static_cast<int64_t>(rng_digest.xxh3)},
                               at::kLong);
  at::Tensor all = at::zeros({4 * s.world.size()}, at::kLong);
  s.comm.all_gather(mine, all, {.async = false});

  if (rank == 0) {
    try {
      checkpoint::Manifest m;
      m.tag = tag;
      m.world_size = s.world.size();
      m.stage = s.config.zero.stage;
      m.model_dtype = std::string(c10::toString(s.flat->dtype()));
      m.train_batch_size = s.config.train_batch_size;
      // The effective DeepSpeed config, key path by key path (as `zero-config check` prints it).
      m.config_origin = s.config.origin();
      for (const ConfigValue& v : s.config.values()) m.config.emplace_back(v.path, v.value);
      m.layout.kinds = kinds;
      if (s.flat->dtype() != at::kFloat) m.params16 = std::string(c10::toString(s.flat->dtype()));
      // The parameters: ours, or with expert parallelism the whole model's — the dense ones once
      // and every expert-parallel rank's experts (ExpertView), so that any layout finds its own.
      const size_t holders = experts ? s.expert_view.names.size() : 1;
      auto name_of = [&](size_t expert_rank, size_t i) -> const std::string& {
        return experts ? s.expert_view.names[expert_rank][i] : s.param_names[i];
      };
      std::map<std::string, int> index_of;
      for (size_t e = 0; e < holders; ++e) {
        for (size_t i = 0; i < s.flat->params().size(); ++i) {
          if (index_of.emplace(name_of(e, i), static_cast<int>(m.layout.params.size())).second)
            m.layout.params.push_back({name_of(e, i), s.flat->params()[i].sizes().vec()});
        }
      }
      for (int r = 0; r < s.world.size(); ++r) {
        if (!writes(r)) continue;
        checkpoint::ManifestShard shard;
        shard.rank = r;
        shard.bytes = static_cast<uint64_t>(all[4 * r].item<int64_t>());
        shard.xxh3 = static_cast<uint64_t>(all[4 * r + 1].item<int64_t>());
        shard.owned_numel = layout.owned_numel();
        const size_t expert_rank = experts ? static_cast<size_t>(s.expert_view.expert_rank_of[static_cast<size_t>(r)]) : 0;
        for (int i = 0; i < static_cast<int>(s.flat->params().size()); ++i) {
          const int g = layout.buckets()[static_cast<size_t>(layout.slot(i).bucket)].replica_group;
          if (!lists(r, g)) continue;
          if (auto fr = layout.fragment(i, layout.owned_shard(g, rank_in_group(r, g))))
            shard.fragments.push_back({index_of.at(name_of(expert_rank, static_cast<size_t>(i))), fr->param_begin,
                                       fr->param_end, fr->owned_offset});
        }
        m.layout.shards.push_back(std::move(shard));
      }
      for (int r = 0; r < s.world.size(); ++r) {
        m.rng_states.push_back({r, static_cast<uint64_t>(all[4 * r + 2].item<int64_t>()),
                                static_cast<uint64_t>(all[4 * r + 3].item<int64_t>())});
      }
      m.global_steps = s.global_steps;
      m.micro_steps = s.micro_steps;
      m.skipped_steps = s.skipped_steps;
      m.applied_steps = s.applied_steps;
      m.lr_last_batch_iteration = s.schedule.last_batch_iteration();
      m.loss_scale = s.scaler.scale();
      m.scaler_iteration = s.scaler.iteration();
      m.scaler_last_overflow_iteration = s.scaler.last_overflow_iteration();
      m.scaler_hysteresis_left = s.scaler.hysteresis_left();
      m.client_state = client;
      json manifest = checkpoint::to_json(m);
      if (!slices.empty()) manifest["tensor_parallel"] = json::parse(slices);
      checkpoint::write_file_atomically((partial / "manifest.json").string(), manifest.dump(1) + "\n");
      // An existing tag moves aside before the new one takes its name; `latest` changes last, so
      // an interruption anywhere leaves `latest` naming a complete checkpoint.
      const fs::path replaced = root / (tag + ".replaced");
      fs::remove_all(replaced);
      if (fs::exists(final_dir)) fs::rename(final_dir, replaced);
      fs::rename(partial, final_dir);
      checkpoint::fsync_directory(root.string());
      checkpoint::write_file_atomically((root / "latest").string(), tag + "\n");
      fs::remove_all(replaced);
    } catch (const std::exception& e) {
      error = dir + ": cannot complete checkpoint " + tag + ": " + e.what();
    }
  }
  agree(s.comm, error, rank, "save_checkpoint");
}

namespace {

// A shape with dimension `dim` (>= 0) made `size`.
std::vector<int64_t> with_size(std::vector<int64_t> shape, int dim, int64_t size) {
  if (dim >= 0) shape[static_cast<size_t>(dim)] = size;
  return shape;
}

}  // namespace

std::string Engine::load_checkpoint(const std::string& dir, const LoadOptions& options) {
  State& s = *state_;
  const int rank = s.world.rank();
  if (!options.tag.empty()) check_tag(options.tag);
  std::unique_ptr<checkpoint::StagedCheckpoint> saved;  // every stage's parts (one stage: the whole model's)
  std::string error;
  std::vector<std::pair<std::string, int>> targets;  // (state kind's name, our state index)
  // Where each range this rank fills comes from: one saved fragment read as it is (the same
  // slice, or both whole), or this rank's slice put together from the saved slices that overlap
  // it along their dimension (another tensor-parallel size).
  struct Piece {
    int part, saved;          // which part, and the parameter's index there
    std::vector<int64_t> shape;  // the saved slice's shape
    int64_t from, lo, hi;     // along the dimension: where the saved slice starts; the overlap
  };
  struct Read {
    int param;  // ours
    layout::Fragment mine;
    int stage = 0;               // the saved pipeline stage holding it
    int part = 0, saved = -1;    // read as it is, when `pieces` is empty
    int dim = -1;                // else along this dimension,
    std::vector<Piece> pieces;   // from these
  };
  std::vector<Read> reads;  // every range this rank fills, checked before any is written
  std::string rng;
  const int members = s.tensor_parallel ? s.tensor_parallel->size() : 1;
  const int member = s.tensor_parallel ? s.tensor_parallel->rank() : 0;
  try {
    saved = std::make_unique<checkpoint::StagedCheckpoint>(dir, options.tag);
    const std::string manifest_path = saved->stage(0).manifest_path();
    // Parameters by name, both ways (a pipeline stage holds only its own: the others' are not
    // unexpected).
    std::vector<std::string> missing, unexpected;
    std::set<std::string> ours(s.param_names.begin(), s.param_names.end());
    std::vector<std::pair<int, int>> source_of(s.param_names.size(), {-1, -1});  // saved (stage, parameter) of each of ours
    for (size_t i = 0; i < s.param_names.size(); ++i) {
      source_of[i] = saved->find_in_stage(s.param_names[i]);
      if (source_of[i].second < 0) missing.push_back(s.param_names[i]);
    }
    if (!s.pipeline) {
      // (With expert parallelism the other ranks' experts are not unexpected.)
      for (const std::string& name : saved->names())
        if (!ours.count(name) && !(s.expert_data_comm && s.is_expert(name))) unexpected.push_back(name);
    }
    if (options.strict && (!missing.empty() || !unexpected.empty())) {
      std::string list;
      for (const auto& n : missing) list += "\n  missing from the checkpoint: " + n;
      for (const auto& n : unexpected) list += "\n  not in the model: " + n;
      throw Error(manifest_path + ": parameter names differ (strict load)" + list, manifest_path);
    }
    // What to fill: the master weights, and the optimizer state when asked.
    const std::vector<std::string> names = s.partition->state_names();
    for (size_t k = 0; k < names.size(); ++k) {
      if (names[k] != "master" && (options.load_module_only || !options.load_optimizer_states)) continue;
      bool everywhere = true;
      for (size_t g = 0; g < saved->stages(); ++g) everywhere = everywhere && saved->stage(g).has_kind(names[k]);
      if (!everywhere)
        throw Error(manifest_path + ": the checkpoint has no optimizer state \"" + names[k] +
                        "\" (it was saved with another optimizer); load with load_optimizer_states = false",
                    manifest_path);
      targets.emplace_back(names[k], static_cast<int>(k));
    }
    // Nothing is written before every rank has checked every file it will read: a damaged
    // checkpoint leaves the engine as it was, on every rank (the master may be the parameters).
    for (size_t i = 0; i < s.param_names.size(); ++i) {
      auto mine = s.partition->owned_fragment(static_cast<int>(i));
      const auto [stage, j] = source_of[i];
      if (!mine || j < 0) continue;
      checkpoint::CheckpointParts* parts = &saved->stage(static_cast<size_t>(stage));
      const std::vector<int64_t> shape = s.flat->params()[i].sizes().vec();
      const engine::ParameterSlice& slice = s.slices[i];
      Read read;
      read.param = static_cast<int>(i);
      read.mine = *mine;
      read.stage = stage;
      // The same slice as saved (or whole on both sides): read as it is, from its part.
      for (size_t p = 0; p < parts->size() && read.saved < 0; ++p) {
        const checkpoint::SavedSlice& saved = parts->slice(p, j);
        if (saved.dim == slice.dim && saved.start == slice.start && parts->part(p).shape(j) == shape &&
            (slice.dim < 0 || saved.whole == slice.whole)) {
          read.part = static_cast<int>(p);
          read.saved = j;
        }
      }
      if (read.saved < 0) {
        // Put together along the dimension the slices split (ours, or the saved ones').
        const checkpoint::SavedSlice& first = parts->slice(0, j);
        read.dim = slice.dim >= 0 ? slice.dim : first.dim;
        const auto whole_shape = [&](const std::vector<int64_t>& local, const checkpoint::SavedSlice& at) {
          return at.dim < 0 ? local : with_size(local, at.dim, at.whole);
        };
        const std::vector<int64_t> ours_whole =
            slice.dim < 0 ? shape : with_size(shape, slice.dim, slice.whole);
        if (whole_shape(parts->part(0).shape(j), first) != ours_whole)
          throw Error(manifest_path + ": parameter " + s.param_names[i] + " has shape " +
                          c10::str(whole_shape(parts->part(0).shape(j), first)) + " in the checkpoint, " +
                          c10::str(ours_whole) + " in the model",
                      manifest_path);
        const int64_t begin = slice.dim < 0 ? 0 : slice.start;
        const int64_t end = begin + (read.dim < 0 ? 0 : shape[static_cast<size_t>(read.dim)]);
        int64_t covered = 0;
        for (size_t p = 0; p < parts->size(); ++p) {
          const checkpoint::SavedSlice& saved = parts->slice(p, j);
          if (saved.dim < 0 && p > 0) break;  // whole in every part: the first one serves
          if (saved.dim >= 0 && saved.dim != read.dim)
            throw Error(parts->part(p).manifest_path() + ": " + s.param_names[i] + " is split along dimension " +
                            std::to_string(saved.dim) + ", the model splits it along " + std::to_string(read.dim),
                        parts->part(p).manifest_path());
          const std::vector<int64_t> saved_shape = parts->part(p).shape(j);
          const int64_t from = saved.dim < 0 ? 0 : saved.start;
          const int64_t lo = std::max(begin, from), hi = std::min(end, from + saved_shape[static_cast<size_t>(read.dim)]);
          if (lo >= hi) continue;
          parts->part(p).verify(j, 0, parts->part(p).numel(j));
          read.pieces.push_back({static_cast<int>(p), j, saved_shape, from, lo, hi});
          covered += hi - lo;
        }
        if (covered != end - begin)
          throw Error(manifest_path + ": the saved slices of " + s.param_names[i] + " cover " + std::to_string(covered) +
                          " of the " + std::to_string(end - begin) + " rows this rank needs",
                      manifest_path);
      } else {
        parts->part(static_cast<size_t>(read.part)).verify(j, mine->param_begin, mine->param_end);
      }
      reads.push_back(std::move(read));
    }
    // Random states come back at the layout they were saved at.
    const int stages = s.pipeline ? s.pipeline->size() : 1, stage = s.pipeline ? s.pipeline->rank() : 0;
    if (!options.load_module_only && static_cast<int>(saved->stages()) == stages &&
        static_cast<int>(saved->stage(static_cast<size_t>(stage)).size()) == members)
      rng = saved_cpu_rng_state(saved->stage(static_cast<size_t>(stage)).part(static_cast<size_t>(member)), rank,
                                s.world.size());
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_everywhere(s.comm, s.tensor_parallel, s.pipeline, error, rank, "load_checkpoint");
  try {  // what was verified; only an I/O error from here on
    // State by state, in pieces of the owned buffer (the whole of it in memory, a tile on NVMe):
    // each fragment's part inside the piece.
    for (const auto& [kind_name, k] : targets) {
      int assembled_for = -1;  // the parameter `assembled` holds this rank's slice of
      at::Tensor assembled;
      s.partition->read_state(k, [&](int64_t offset, int64_t length, float* out) {
        for (const Read& read : reads) {
          const int64_t first = read.mine.owned_offset, count = read.mine.param_end - read.mine.param_begin;
          const int64_t lo = std::max(first, offset), hi = std::min(first + count, offset + length);
          if (lo >= hi) continue;
          const int64_t begin = read.mine.param_begin + (lo - first), end = read.mine.param_begin + (hi - first);
          checkpoint::CheckpointParts* parts = &saved->stage(static_cast<size_t>(read.stage));
          if (read.pieces.empty()) {
            checkpoint::CheckpointReader& r = parts->part(static_cast<size_t>(read.part));
            r.read(read.saved, r.kind(kind_name), begin, end, out + (lo - offset));
            continue;
          }
          if (assembled_for != read.param) {
            assembled = at::empty(s.flat->params()[static_cast<size_t>(read.param)].sizes(), at::kFloat);
            const int64_t mine_from = s.slices[static_cast<size_t>(read.param)].dim < 0
                                          ? 0
                                          : s.slices[static_cast<size_t>(read.param)].start;
            for (const Piece& piece : read.pieces) {
              checkpoint::CheckpointReader& r = parts->part(static_cast<size_t>(piece.part));
              at::Tensor saved = at::empty(piece.shape, at::kFloat);
              r.read(piece.saved, r.kind(kind_name), 0, saved.numel(), saved.data_ptr<float>());
              assembled.narrow(read.dim, piece.lo - mine_from, piece.hi - piece.lo)
                  .copy_(saved.narrow(read.dim, piece.lo - piece.from, piece.hi - piece.lo));
            }
            assembled_for = read.param;
          }
          std::memcpy(out + (lo - offset), assembled.data_ptr<float>() + begin,
                      static_cast<size_t>(end - begin) * sizeof(float));
        }
      });
    }
    set_cpu_rng_state(rng);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_everywhere(s.comm, s.tensor_parallel, s.pipeline, error, rank, "load_checkpoint");
  const json& m = saved->stage(0).manifest();
  s.partition->sync_parameters(/*master_changed=*/true);
  s.buckets->forget_secondaries();  // hpZ: they hold the weights before the load
  s.buckets->zero();
  if (!options.load_module_only) {
    const json& c = m.at("counters");
    s.global_steps = c.at("global_steps");
    s.micro_steps = c.at("micro_steps");
    // Saved on an accumulation boundary (as a trainer saves): the next step starts afresh at
    // this config's accumulation, which may differ from the save's (another data-parallel size,
    // or the pipeline's micro-batches). Saved in the middle of one: resumed where it stopped.
    const json saved_accumulation = m.value("config", json::object()).value("gradient_accumulation_steps", json());
    if (saved_accumulation.is_number_integer() && saved_accumulation.get<int64_t>() > 0 &&
        s.micro_steps % saved_accumulation.get<int64_t>() == 0 &&
        s.micro_steps / saved_accumulation.get<int64_t>() == s.global_steps) {
      s.micro_steps = s.global_steps * s.config.gradient_accumulation_steps;
    }
    s.skipped_steps = c.at("skipped_steps");
    if (options.load_optimizer_states) s.applied_steps = c.at("applied_steps");
    if (options.load_lr_scheduler_states)
      s.schedule.set_last_batch_iteration(m.at("lr_scheduler").at("last_batch_iteration"));
    const json& l = m.at("loss_scaler");
    s.scaler.restore(l.at("scale"), l.at("iteration"), l.at("last_overflow_iteration"), l.at("hysteresis_left"));
  }
  return m.contains("client_state") ? m["client_state"].dump() : "{}";
}

}  // namespace zero
