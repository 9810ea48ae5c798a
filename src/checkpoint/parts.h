// CheckpointParts — a checkpoint as its parts: the whole of a plain one (DIR/TAG), or every
// tensor-parallel member's (DIR/tensor_parallel_<t>_of_<n>/TAG, docs/tensor_parallel.md), each
// with where its parameters' slices sit in the whole parameters. Reads whole parameters, joining
// the slices, for tools (zero-ckpt consolidate); the engine reads slices and pieces of them.
// Torch-free; every problem is a zero::Error naming the file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/reader.h"

namespace zero::checkpoint {

// Where tensor-parallel member `rank` of `size` keeps its part of every checkpoint in DIR.
std::string tensor_parallel_root(const std::string& dir, int rank, int size);
// Where pipeline stage `stage` of `stages` keeps its checkpoints in DIR (each a plain or a
// tensor-parallel one, of the stage's parameters; docs/pipeline_parallel.md).
std::string pipeline_root(const std::string& dir, int stage, int stages);

// A saved parameter's slice: along `dim` (-1: the whole parameter), from `start`, of a whole
// parameter `whole` long along that dimension (its element count when whole).
struct SavedSlice {
  int dim = -1;
  int64_t start = 0, whole = 0;
};

// A checkpoint's parameters whole, whatever layout saved them (tensor-parallel slices joined,
// pipeline stages one after another): what tools read (zero-ckpt consolidate's sinks).
class WholeParameters {
 public:
  virtual ~WholeParameters() = default;
  virtual const std::string& tag() const = 0;
  virtual const std::string& manifest_path() const = 0;  // the (first stage's first part's) manifest
  virtual const nlohmann::json& manifest() const = 0;
  virtual int num_params() const = 0;
  virtual const std::string& name(int param) const = 0;
  virtual int find(const std::string& name) const = 0;  // -1: none
  virtual bool has_kind(const std::string& kind) const = 0;
  virtual std::vector<int64_t> shape(int param) const = 0;
  virtual int64_t numel(int param) const = 0;
  // The whole parameter's state `kind` as fp32 (every element).
  virtual void read_whole(int param, const std::string& kind, float* out) = 0;
};

class CheckpointParts : public WholeParameters {
 public:
  // TAG (empty: DIR/latest's) in DIR. Every part's manifest is checked, its slices against its
  // shapes, and the parts against each other (the same parameters in the same order).
  CheckpointParts(const std::string& dir, const std::string& tag = "");

  size_t size() const { return parts_.size(); }  // 1, or the tensor-parallel size it was saved at
  CheckpointReader& part(size_t i) { return *parts_[i].reader; }
  const CheckpointReader& part(size_t i) const { return *parts_[i].reader; }
  const SavedSlice& slice(size_t part, int param) const { return parts_[part].slices[static_cast<size_t>(param)]; }

  // As CheckpointReader's, for whole parameters (the first part's manifest and names).
  const std::string& tag() const override { return part(0).tag(); }
  const std::string& manifest_path() const override { return part(0).manifest_path(); }
  const nlohmann::json& manifest() const override { return part(0).manifest(); }
  int num_params() const override { return part(0).num_params(); }
  const std::string& name(int param) const override { return part(0).name(param); }
  int find(const std::string& name) const override { return part(0).find(name); }
  bool has_kind(const std::string& kind) const override;
  std::vector<int64_t> shape(int param) const override;  // the whole parameter's
  int64_t numel(int param) const override;
  // Its slices joined.
  void read_whole(int param, const std::string& kind, float* out) override;

 private:
  void check_tiling() const;  // every split parameter's slices, in part order, cover it exactly
  struct Part {
    std::unique_ptr<CheckpointReader> reader;
    std::vector<SavedSlice> slices;  // per saved parameter
  };
  std::vector<Part> parts_;
};

// A checkpoint as its pipeline stages' parts: one CheckpointParts per stage it was saved at
// (DIR/pipeline_<s>_of_<p>/..., each holding other parameters), or the one of a checkpoint saved
// without stages. The stages must be parts of one save (the same counters). As WholeParameters,
// every stage's parameters in stage order.
class StagedCheckpoint : public WholeParameters {
 public:
  StagedCheckpoint(const std::string& dir, const std::string& tag = "");
  size_t stages() const { return stages_.size(); }
  CheckpointParts& stage(size_t s) { return *stages_[s]; }
  const CheckpointParts& stage(size_t s) const { return *stages_[s]; }
  // The stage holding parameter `name` and its index there; {-1, -1} when none does.
  std::pair<int, int> find_in_stage(const std::string& name) const;
  std::vector<std::string> names() const;  // every stage's, in stage order

  const std::string& tag() const override { return stages_.front()->tag(); }
  const std::string& manifest_path() const override { return stages_.front()->manifest_path(); }
  const nlohmann::json& manifest() const override { return stages_.front()->manifest(); }
  int num_params() const override { return static_cast<int>(where_.size()); }
  const std::string& name(int param) const override;
  int find(const std::string& name) const override;
  bool has_kind(const std::string& kind) const override;
  std::vector<int64_t> shape(int param) const override;
  int64_t numel(int param) const override;
  void read_whole(int param, const std::string& kind, float* out) override;

 private:
  std::pair<CheckpointParts*, int> at(int param) const;  // its stage and index there
  std::vector<std::unique_ptr<CheckpointParts>> stages_;
  std::vector<std::pair<int, int>> where_;  // per parameter in stage order: (stage, index there)
};

}  // namespace zero::checkpoint
