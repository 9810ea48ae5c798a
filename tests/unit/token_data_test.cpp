#include "models/gpt/token_data.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "models/gpt/llmc_files.h"
#include "zero/error.h"

using zero::gpt::Batch;
using zero::gpt::TokenData;

namespace {

std::vector<uint16_t> counting(uint16_t first, size_t n) {
  std::vector<uint16_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

}  // namespace

TEST(TokenData, BatchIsTheWindowAndTargetsAreShiftedByOne) {
  TokenData data({counting(0, 25)}, "mem");
  EXPECT_EQ(data.batches_per_epoch(2, 3), 4);  // (25 - 1) / 6
  Batch b = data.batch(1, 2, 3);
  EXPECT_EQ(b.inputs, (std::vector<int32_t>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(b.targets, (std::vector<int32_t>{7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(data.batch(5, 2, 3).inputs, data.batch(1, 2, 3).inputs);  // epoch 2 starts over
}

TEST(TokenData, WindowsNeverCrossShards) {
  TokenData data({counting(0, 8), counting(100, 8)}, "mem");  // 1 window of 6 each
  EXPECT_EQ(data.batches_per_epoch(2, 3), 2);
  EXPECT_EQ(data.batch(1, 2, 3).inputs.front(), 100);
}

TEST(TokenData, RanksTakeContiguousRowsOfTheSameGlobalBatch) {
  TokenData data({counting(0, 100)}, "mem");
  Batch global = data.batch(2, 6, 4);
  std::vector<int32_t> joined;
  for (int r = 0; r < 3; ++r) {
    Batch part = data.rank_rows(global, r, 3);
    EXPECT_EQ(part.rows, 2);
    joined.insert(joined.end(), part.inputs.begin(), part.inputs.end());
  }
  EXPECT_EQ(joined, global.inputs);
  EXPECT_THROW(data.rank_rows(global, 0, 4), zero::Error);
}

TEST(TokenData, ShuffleIsASeededPermutationPerEpoch) {
  TokenData data({counting(0, 200)}, "mem");
  const int64_t n = data.batches_per_epoch(1, 10);  // 19
  std::set<int32_t> firsts;
  std::vector<int32_t> epoch0, epoch1;
  for (int64_t s = 0; s < n; ++s) {
    firsts.insert(data.batch(s, 1, 10, 7).inputs.front());
    epoch0.push_back(data.batch(s, 1, 10, 7).inputs.front());
    epoch1.push_back(data.batch(n + s, 1, 10, 7).inputs.front());
  }
  EXPECT_EQ(static_cast<int64_t>(firsts.size()), n);  // every window once
  EXPECT_NE(epoch0, epoch1);                          // a new order each epoch
  std::vector<int32_t> sequential;
  for (int64_t s = 0; s < n; ++s) sequential.push_back(data.batch(s, 1, 10).inputs.front());
  EXPECT_NE(epoch0, sequential);
  EXPECT_EQ(data.batch(3, 1, 10, 7).inputs, data.batch(3, 1, 10, 7).inputs);  // deterministic
}

TEST(TokenData, TextAndShardsFromFiles) {
  const auto dir = std::filesystem::temp_directory_path() / "token_data_test";
  std::filesystem::create_directories(dir);
  { std::ofstream((dir / "t.txt").string()) << "hello world"; }
  TokenData text = TokenData::from_text((dir / "t.txt").string());
  EXPECT_EQ(text.tokens(), 11);
  EXPECT_EQ(text.batch(0, 1, 4).inputs, (std::vector<int32_t>{'h', 'e', 'l', 'l'}));
  zero::gpt::write_token_shard((dir / "a.bin").string(), counting(0, 9));
  zero::gpt::write_token_shard((dir / "b.bin").string(), counting(0, 9));
  EXPECT_EQ(TokenData::from_shards((dir / "*.bin").string(), 50).tokens(), 18);
  try {
    TokenData::from_text((dir / "t.txt").string()).batches_per_epoch(4, 4);
    FAIL();
  } catch (const zero::Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.txt: 11 tokens hold no batch of 4 × 4 (+1) tokens"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}
