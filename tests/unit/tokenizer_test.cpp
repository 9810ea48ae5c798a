// The llm.c tokenizer file reader (decoding GPT-2 samples) and the built-in corpus.
#include "models/gpt/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/gpt/builtin_corpus.h"
#include "zero/error.h"

using namespace zero::gpt;

namespace {

std::string write_tokenizer(const std::string& name, uint32_t magic, uint32_t version,
                            const std::vector<std::string>& pieces, uint32_t eot, size_t cut = 0) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::vector<uint32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<uint32_t>(pieces.size());
  header[3] = eot;
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  for (const auto& p : pieces) bytes += static_cast<char>(p.size()) + p;
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() - cut);
  return path;
}

std::string error_of(const std::string& path) {
  try {
    Tokenizer::from_llmc(path);
  } catch (const zero::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Tokenizer, DecodesLlmcPiecesAndNamesTheEndOfText) {
  const std::string path = write_tokenizer("tok_ok.bin", kTokenizerMagic, 2, {"Hello", ",", " world", "<|eot|>"}, 3);
  const Tokenizer t = Tokenizer::from_llmc(path);
  EXPECT_EQ(t.vocab(), 4);
  EXPECT_EQ(t.eot(), 3);
  EXPECT_EQ(t.decode({0, 1, 2}), "Hello, world");
  EXPECT_EQ(t.decode({0, 99}), "Hello") << "ids outside the vocabulary decode to nothing";
  EXPECT_EQ(Tokenizer::from_llmc(write_tokenizer("tok_v1.bin", kTokenizerMagic, 1, {"a"}, 7)).eot(), -1);
  std::filesystem::remove(path);
}

TEST(Tokenizer, BadFilesNameTheFileAndTheField) {
  EXPECT_NE(
      error_of(write_tokenizer("tok_magic.bin", 123, 2, {"a"}, 0)).find("tok_magic.bin: header field magic = 123"),
      std::string::npos);
  EXPECT_NE(error_of(write_tokenizer("tok_version.bin", kTokenizerMagic, 9, {"a"}, 0)).find("header field version = 9"),
            std::string::npos);
  EXPECT_NE(error_of(write_tokenizer("tok_eot.bin", kTokenizerMagic, 2, {"a"}, 5)).find("eot_token = 5"),
            std::string::npos);
  EXPECT_NE(
      error_of(write_tokenizer("tok_cut.bin", kTokenizerMagic, 2, {"abc", "de"}, 0, 1)).find("token 1: truncated"),
      std::string::npos);
  EXPECT_NE(error_of("/nonexistent/tok.bin").find("/nonexistent/tok.bin: cannot open"), std::string::npos);
}

TEST(Tokenizer, BytesAndPrintable) {
  const Tokenizer b = Tokenizer::bytes();
  EXPECT_EQ(b.vocab(), 256);
  EXPECT_EQ(b.decode({104, 105, 10}), "hi\n");
  EXPECT_EQ(Tokenizer::printable(std::string("a\x01\n\xc3\xa9", 5), true), "a.\n..");
  EXPECT_EQ(Tokenizer::printable(std::string("a\x01\n\xc3\xa9", 5), false), "a.\n\xc3\xa9");
}

TEST(BuiltinCorpus, IsDeterministicPlainTextWithSums) {
  const std::string a = builtin_corpus(1, 20000), b = builtin_corpus(1, 20000), c = builtin_corpus(2, 20000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_GE(a.size(), 20000u);
  EXPECT_LT(a.size(), 20300u);
  for (char ch : a) ASSERT_TRUE(ch == '\n' || (ch >= 32 && ch < 127)) << int(ch);
  EXPECT_NE(a.find(" = "), std::string::npos);
  EXPECT_NE(a.find("the "), std::string::npos);
}
