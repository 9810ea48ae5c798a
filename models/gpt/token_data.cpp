#include "models/gpt/token_data.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <random>

#include "models/gpt/llmc_files.h"
#include "zero/error.h"

namespace zero::gpt {

TokenData::TokenData(std::vector<std::vector<uint16_t>> shards, std::string origin)
    : shards_(std::move(shards)), origin_(std::move(origin)) {}

TokenData TokenData::from_shards(const std::string& glob, int vocab) {
  std::vector<std::vector<uint16_t>> shards;
  for (const auto& path : expand_glob(glob)) shards.push_back(read_token_shard(path, vocab));
  return TokenData(std::move(shards), glob);
}

TokenData TokenData::from_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the text file", path);
  std::vector<uint16_t> bytes;
  for (auto it = std::istreambuf_iterator<char>(in); it != std::istreambuf_iterator<char>(); ++it) {
    bytes.push_back(static_cast<uint8_t>(*it));
  }
  return TokenData({std::move(bytes)}, path);
}

int64_t TokenData::tokens() const {
  int64_t n = 0;
  for (const auto& s : shards_) n += static_cast<int64_t>(s.size());
  return n;
}

int64_t TokenData::batches_per_epoch(int64_t batch_rows, int64_t seq) const {
  const int64_t window = batch_rows * seq;
  int64_t n = 0;
  for (const auto& s : shards_) n += s.empty() ? 0 : (static_cast<int64_t>(s.size()) - 1) / window;
  if (n == 0) {
    throw Error(origin_ + ": " + std::to_string(tokens()) + " tokens hold no batch of " + std::to_string(batch_rows) +
                    " × " + std::to_string(seq) + " (+1) tokens",
                origin_);
  }
  return n;
}

Batch TokenData::batch(int64_t step, int64_t batch_rows, int64_t seq, int64_t shuffle_seed) const {
  const int64_t per_epoch = batches_per_epoch(batch_rows, seq);
  const int64_t epoch = step / per_epoch;
  int64_t index = step % per_epoch;
  if (shuffle_seed >= 0) {
    std::vector<int64_t> order(static_cast<size_t>(per_epoch));
    for (int64_t i = 0; i < per_epoch; ++i) order[static_cast<size_t>(i)] = i;
    // Note: std::shuffle's result depends on the library; a Fisher-Yates over mt19937_64 fixes it.
    std::mt19937_64 rng(static_cast<uint64_t>(shuffle_seed) * 1000003u + static_cast<uint64_t>(epoch));
    for (int64_t i = per_epoch - 1; i > 0; --i) {
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(rng() % static_cast<uint64_t>(i + 1))]);
    }
    index = order[static_cast<size_t>(index)];
  }
  const int64_t window = batch_rows * seq;
  for (const auto& s : shards_) {  // find the shard holding window `index`
    const int64_t here = s.empty() ? 0 : (static_cast<int64_t>(s.size()) - 1) / window;
    if (index >= here) {
      index -= here;
      continue;
    }
    Batch b{batch_rows, seq, std::vector<int32_t>(static_cast<size_t>(window)),
            std::vector<int32_t>(static_cast<size_t>(window))};
    const size_t start = static_cast<size_t>(index * window);
    for (size_t i = 0; i < static_cast<size_t>(window); ++i) {
      b.inputs[i] = s[start + i];
      b.targets[i] = s[start + i + 1];
    }
    return b;
  }
  throw Error(origin_ + ": batch index out of range", origin_);  // unreachable: per_epoch counted them
}

Batch TokenData::rank_rows(const Batch& global, int rank, int ranks) const {
  if (ranks < 1 || global.rows % ranks != 0) {
    throw Error(origin_ + ": a batch of " + std::to_string(global.rows) + " rows does not split over " +
                    std::to_string(ranks) + " ranks",
                origin_);
  }
  const int64_t rows = global.rows / ranks, first = rank * rows * global.seq, count = rows * global.seq;
  Batch b{rows, global.seq, {}, {}};
  b.inputs.assign(global.inputs.begin() + first, global.inputs.begin() + first + count);
  b.targets.assign(global.targets.begin() + first, global.targets.begin() + first + count);
  return b;
}

}  // namespace zero::gpt
