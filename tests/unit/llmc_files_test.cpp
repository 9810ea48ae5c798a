// llm.c checkpoints and token shards: round trips, and every kind of bad file named precisely.
#include "models/gpt/llmc_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "zero/error.h"

using namespace zero::gpt;

namespace {

class LlmcFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("llmc_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The error message of `f`, or "" when it does not throw.
  template <typename F>
  static std::string error_of(F&& f) {
    try {
      f();
    } catch (const zero::Error& e) {
      return e.what();
    }
    return "";
  }

  // Overwrites bytes of a file at `offset`.
  void patch(const std::string& file, std::streamoff offset, const void* data, size_t n) {
    std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(offset);
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  }

  std::filesystem::path dir_;
};

const GptShape kShape{.max_seq = 8, .vocab = 10, .layers = 2, .heads = 2, .channels = 4, .padded_vocab = 16};

std::vector<float> counting(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

}  // namespace

TEST(LlmcLayout, TensorOrderAndSizes) {
  auto specs = checkpoint_tensors(kShape);
  ASSERT_EQ(specs.size(), 16u);
  EXPECT_EQ(specs[0].name, "wte");
  EXPECT_EQ(specs[0].numel(), 16 * 4);
  EXPECT_EQ(specs[4].name, "qkvw");
  EXPECT_EQ(specs[4].shape, (std::vector<int64_t>{2, 12, 4}));
  EXPECT_EQ(specs[12].name, "fcprojw");
  EXPECT_EQ(specs[12].shape, (std::vector<int64_t>{2, 4, 16}));
  EXPECT_EQ(specs[15].name, "lnfb");
  // Vp*C + maxT*C + L*(2C + 3C*C + 3C + C*C + C + 2C + 4C*C + 4C + 4C*C + C) + 2C
  const int64_t C = 4, L = 2;
  EXPECT_EQ(
      checkpoint_numel(kShape),
      16 * C + 8 * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C);
  EXPECT_EQ(specs[1].offset, 64);
}

TEST_F(LlmcFiles, CheckpointRoundTrip) {
  const auto params = counting(checkpoint_numel(kShape));
  write_llmc_checkpoint(path("m.bin"), kShape, params);
  EXPECT_EQ(std::filesystem::file_size(path("m.bin")), 1024 + 4 * params.size());
  LlmcCheckpoint c = read_llmc_checkpoint(path("m.bin"));
  EXPECT_EQ(c.shape, kShape);
  EXPECT_EQ(c.params, params);
  EXPECT_FALSE(std::filesystem::exists(path("m.bin.tmp")));
}

TEST_F(LlmcFiles, BadCheckpointsNameFileAndField) {
  const auto params = counting(checkpoint_numel(kShape));
  const std::string file = path("bad.bin");
  auto fresh = [&] { write_llmc_checkpoint(file, kShape, params); };
  auto expect = [&](const std::string& fragment) {
    std::string e = error_of([&] { read_llmc_checkpoint(file); });
    EXPECT_NE(e.find(file), std::string::npos) << e;
    EXPECT_NE(e.find(fragment), std::string::npos) << e;
  };
  fresh();
  int32_t value = 1234;
  patch(file, 0, &value, 4);
  expect("header magic 1234, expected 20240326");
  fresh();
  value = 5;
  patch(file, 4, &value, 4);
  expect("header version 5, expected 3");
  fresh();
  value = 6;  // C = 4 → 6: the size no longer matches, and 6 % NH(2) == 0
  patch(file, 24, &value, 4);
  expect("expected");
  fresh();
  value = 3;  // C = 3 with NH = 2
  patch(file, 24, &value, 4);
  expect("header field C = 3 is not divisible by NH = 2");
  fresh();
  value = 4;  // Vp = 4 < V = 10
  patch(file, 28, &value, 4);
  expect("header field Vp = 4 is below V = 10");
  fresh();
  value = 0;
  patch(file, 16, &value, 4);
  expect("header field L = 0, must be positive");
  fresh();
  value = 1 << 30;  // C = 2^30 (NH = 2 divides it): 4·C·C wraps int64; refused before any size check
  patch(file, 24, &value, 4);
  expect("the header's shape (L, C, V, maxT) needs more parameters than any file can hold");
  fresh();
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 4);
  expect("truncated");
  fresh();
  { std::ofstream(file, std::ios::app | std::ios::binary) << "xx"; }
  expect("trailing bytes");
  std::filesystem::resize_file(file, 100);
  expect("truncated header: 100 of 1024 bytes");
  EXPECT_NE(error_of([&] { read_llmc_checkpoint(path("missing.bin")); }).find("cannot open"), std::string::npos);
  EXPECT_NE(error_of([&] { write_llmc_checkpoint(file, kShape, {1.0f}); }).find("the shape needs"), std::string::npos);
}

TEST_F(LlmcFiles, TokenShardRoundTripAndErrors) {
  const std::vector<uint16_t> tokens = {1, 2, 3, 9, 0, 7};
  const std::string file = path("t.bin");
  write_token_shard(file, tokens);
  EXPECT_EQ(std::filesystem::file_size(file), 1024u + 2 * tokens.size());
  EXPECT_EQ(read_token_shard(file, 10), tokens);
  std::string e = error_of([&] { read_token_shard(file, 9); });
  EXPECT_NE(e.find(file + ": token 9 at position 3 is not below the vocabulary size 9"), std::string::npos) << e;
  int32_t value = 42;
  patch(file, 0, &value, 4);
  EXPECT_NE(error_of([&] { read_token_shard(file, 10); }).find("header magic 42, expected 20240520"),
            std::string::npos);
  write_token_shard(file, tokens);
  value = 2;
  patch(file, 4, &value, 4);
  EXPECT_NE(error_of([&] { read_token_shard(file, 10); }).find("header version 2, expected 1"), std::string::npos);
  write_token_shard(file, tokens);
  value = 7;  // claims one token more than the file holds
  patch(file, 8, &value, 4);
  EXPECT_NE(error_of([&] { read_token_shard(file, 10); }).find("truncated"), std::string::npos);
}

TEST_F(LlmcFiles, GlobIsSortedAndNamesThePatternWhenEmpty) {
  write_token_shard(path("shard_002.bin"), {1});
  write_token_shard(path("shard_001.bin"), {1});
  auto files = expand_glob(path("shard_*.bin"));
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], path("shard_001.bin"));
  std::string e = error_of([&] { expand_glob(path("nothing_*.bin")); });
  EXPECT_NE(e.find("no files match " + path("nothing_*.bin")), std::string::npos) << e;
}
