// Training data for the GPT trainer: llm.c token shards or a raw text file (bytes, V = 256).
//
// Batch s of B rows × T tokens is the window tokens[s·B·T : s·B·T + B·T + 1] of one shard (inputs,
// and targets shifted by one); windows never cross shards. An epoch visits every window of every
// shard, in order, or in a permutation drawn from (seed, epoch) with shuffling. The global batch of
// a step is the same whatever the world size; rank r takes rows [r·B/N, (r+1)·B/N) of it.
// Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zero::gpt {

struct Batch {
  int64_t rows = 0, seq = 0;
  std::vector<int32_t> inputs, targets;  // rows × seq, row-major
};

class TokenData {
 public:
  // All files a glob names (sorted), each an llm.c shard checked against `vocab`.
  static TokenData from_shards(const std::string& glob, int vocab);
  // The bytes of a file as tokens 0..255.
  static TokenData from_text(const std::string& path);
  // From tokens already in memory (one shard per vector).
  explicit TokenData(std::vector<std::vector<uint16_t>> shards, std::string origin);

  // Windows of batch_rows × seq (+1) tokens per epoch; an error naming the data when it is 0.
  int64_t batches_per_epoch(int64_t batch_rows, int64_t seq) const;
  // The global batch of optimizer step `step` (counting across epochs), or the rows of it that
  // `rank` of `ranks` takes. shuffle_seed < 0: sequential order.
  Batch batch(int64_t step, int64_t batch_rows, int64_t seq, int64_t shuffle_seed = -1) const;
  Batch rank_rows(const Batch& global, int rank, int ranks) const;
  int64_t tokens() const;

 private:
  std::vector<std::vector<uint16_t>> shards_;
  std::string origin_;
};

}  // namespace zero::gpt
