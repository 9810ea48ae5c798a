#include "models/gpt/llmc_files.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "zero/error.h"

namespace zero::gpt {
namespace {

using Header = std::array<int32_t, 256>;

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw Error(path + ": " + what, path); }

std::ifstream open_for_reading(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open the file");
  return in;
}

Header read_header(std::ifstream& in, const std::string& path) {
  Header h{};
  in.read(reinterpret_cast<char*>(h.data()), sizeof h);
  if (in.gcount() != static_cast<std::streamsize>(sizeof h)) {
    fail(path, "truncated header: " + std::to_string(in.gcount()) + " of 1024 bytes");
  }
  return h;
}

void expect_size(const std::string& path, uint64_t expected, const std::string& what) {
  const uint64_t actual = std::filesystem::file_size(path);
  if (actual != expected) {
    fail(path, "file size " + std::to_string(actual) + " bytes, expected " + std::to_string(expected) + " (" + what +
                   ")" + (actual < expected ? ": truncated" : ": trailing bytes"));
  }
}

void write_all(const std::string& path, const Header& header, const char* data, size_t bytes) {
  // Written to a temporary name and renamed, so a crash never leaves a half-written file in place.
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) fail(path, "cannot create " + temporary);
    out.write(reinterpret_cast<const char*>(header.data()), sizeof header);
    out.write(data, static_cast<std::streamsize>(bytes));
    if (!out.flush()) fail(path, "write failed (disk full?)");
  }
  std::filesystem::rename(temporary, path);
}

}  // namespace

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The tensors' shapes only (offsets need their sizes, which may not fit in int64 yet).
static std::vector<TensorSpec> checkpoint_tensors_unchecked(const GptShape& s) {
  const int64_t L = s.layers, C = s.channels;
  std::vector<TensorSpec> specs = {{"wte", {s.padded_vocab, C}},
                                   {"wpe", {s.max_seq, C}},
                                   {"ln1w", {L, C}},
                                   {"ln1b", {L, C}},
                                   {"qkvw", {L, 3 * C, C}},
                                   {"qkvb", {L, 3 * C}},
                                   {"attprojw", {L, C, C}},
                                   {"attprojb", {L, C}},
                                   {"ln2w", {L, C}},
                                   {"ln2b", {L, C}},
                                   {"fcw", {L, 4 * C, C}},
                                   {"fcb", {L, 4 * C}},
                                   {"fcprojw", {L, C, 4 * C}},
                                   {"fcprojb", {L, C}},
                                   {"lnfw", {C}},
                                   {"lnfb", {C}}};
  return specs;
}

std::vector<TensorSpec> checkpoint_tensors(const GptShape& s) {
  std::vector<TensorSpec> specs = checkpoint_tensors_unchecked(s);
  int64_t offset = 0;
  for (auto& spec : specs) {
    spec.offset = offset;
    offset += spec.numel();
  }
  return specs;
}

int64_t checkpoint_numel(const GptShape& shape) {
  const auto specs = checkpoint_tensors(shape);
  return specs.back().offset + specs.back().numel();
}

LlmcCheckpoint read_llmc_checkpoint(const std::string& path) {
  std::ifstream in = open_for_reading(path);
  const Header h = read_header(in, path);
  if (h[0] != kCheckpointMagic)
    fail(path, "header magic " + std::to_string(h[0]) + ", expected 20240326 (llm.c model)");
  if (h[1] != kCheckpointVersionFp32) {
    fail(path,
         "header version " + std::to_string(h[1]) + ", expected 3 (fp32 weights; version 5 is bf16, not supported)");
  }
  LlmcCheckpoint c;
  c.shape = {h[2], h[3], h[4], h[5], h[6], h[7]};
  const GptShape& s = c.shape;
  const std::pair<const char*, int> fields[] = {{"maxT", s.max_seq}, {"V", s.vocab},    {"L", s.layers},
                                                {"NH", s.heads},     {"C", s.channels}, {"Vp", s.padded_vocab}};
  for (const auto& [name, value] : fields) {
    if (value <= 0)
      fail(path, std::string("header field ") + name + " = " + std::to_string(value) + ", must be positive");
  }
  if (s.padded_vocab < s.vocab)
    fail(path, "header field Vp = " + std::to_string(s.padded_vocab) + " is below V = " + std::to_string(s.vocab));
  if (s.channels % s.heads != 0) {
    fail(path,
         "header field C = " + std::to_string(s.channels) + " is not divisible by NH = " + std::to_string(s.heads));
  }
  // The header's fields are int32s chosen by whoever wrote the file: their products can pass
  // int64 (C = 2^31 makes 4·C·C wrap), so the count is first taken in 128 bits.
  __int128 wide = 0;
  for (const TensorSpec& spec : checkpoint_tensors_unchecked(s)) {
    __int128 numel = 1;
    for (int64_t d : spec.shape) numel *= d;  // at most three factors below 2^33: no overflow
    wide += numel;
  }
  if (wide > static_cast<__int128>(INT64_MAX / 4))
    fail(path, "the header's shape (L, C, V, maxT) needs more parameters than any file can hold");
  const int64_t n = checkpoint_numel(s);
  expect_size(path, 1024 + 4 * static_cast<uint64_t>(n), std::to_string(n) + " fp32 parameters for this header");
  c.params.resize(static_cast<size_t>(n));
  in.read(reinterpret_cast<char*>(c.params.data()), static_cast<std::streamsize>(4 * n));
  if (in.gcount() != static_cast<std::streamsize>(4 * n)) fail(path, "truncated parameters");
  return c;
}

bool per_layer(const TensorSpec& spec) {
  return spec.name != "wte" && spec.name != "wpe" && spec.name != "lnfw" && spec.name != "lnfb";
}

void write_llmc_checkpoint(const std::string& path, const GptShape& s, const std::vector<float>& params) {
  if (static_cast<int64_t>(params.size()) != checkpoint_numel(s)) {
    fail(path, "writing " + std::to_string(params.size()) + " parameters, the shape needs " +
                   std::to_string(checkpoint_numel(s)));
  }
  LlmcCheckpointWriter writer(path, s);
  writer.append(params.data(), static_cast<int64_t>(params.size()));
  writer.finish();
}

// Written to a temporary name and renamed, so a crash never leaves a half-written file in place.
LlmcCheckpointWriter::LlmcCheckpointWriter(std::string path, const GptShape& s)
    : path_(std::move(path)), expected_(checkpoint_numel(s)), out_(path_ + ".tmp", std::ios::binary | std::ios::trunc) {
  if (!out_) fail(path_, "cannot create " + path_ + ".tmp");
  Header h{};
  h[0] = kCheckpointMagic;
  h[1] = kCheckpointVersionFp32;
  h[2] = s.max_seq;
  h[3] = s.vocab;
  h[4] = s.layers;
  h[5] = s.heads;
  h[6] = s.channels;
  h[7] = s.padded_vocab;
  out_.write(reinterpret_cast<const char*>(h.data()), sizeof h);
}

LlmcCheckpointWriter::~LlmcCheckpointWriter() {
  if (out_.is_open()) {  // not finished: leave nothing behind
    out_.close();
    std::error_code ignored;
    std::filesystem::remove(path_ + ".tmp", ignored);
  }
}

void LlmcCheckpointWriter::append(const float* values, int64_t count) {
  if (written_ + count > expected_)
    fail(path_, "more than the " + std::to_string(expected_) + " parameters the shape holds");
  out_.write(reinterpret_cast<const char*>(values), static_cast<std::streamsize>(4 * count));
  written_ += count;
}

void LlmcCheckpointWriter::finish() {
  if (written_ != expected_)
    fail(path_, "wrote " + std::to_string(written_) + " parameters, the shape needs " + std::to_string(expected_));
  if (!out_.flush()) fail(path_, "write failed (disk full?)");
  out_.close();
  std::filesystem::rename(path_ + ".tmp", path_);
}

std::vector<uint16_t> read_token_shard(const std::string& path, int vocab) {
  std::ifstream in = open_for_reading(path);
  const Header h = read_header(in, path);
  if (h[0] != kShardMagic) fail(path, "header magic " + std::to_string(h[0]) + ", expected 20240520 (llm.c tokens)");
  if (h[1] != kShardVersion) fail(path, "header version " + std::to_string(h[1]) + ", expected 1");
  if (h[2] < 0) fail(path, "header token count " + std::to_string(h[2]) + " is negative");
  const int64_t n = h[2];
  expect_size(path, 1024 + 2 * static_cast<uint64_t>(n), std::to_string(n) + " uint16 tokens");
  std::vector<uint16_t> tokens(static_cast<size_t>(n));
  in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(2 * n));
  if (in.gcount() != static_cast<std::streamsize>(2 * n)) fail(path, "truncated tokens");
  auto bad = std::find_if(tokens.begin(), tokens.end(), [&](uint16_t t) { return t >= vocab; });
  if (bad != tokens.end()) {
    fail(path, "token " + std::to_string(*bad) + " at position " + std::to_string(bad - tokens.begin()) +
                   " is not below the vocabulary size " + std::to_string(vocab));
  }
  return tokens;
}

void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) fail(path, "more tokens than an int32 header counts");
  Header h{};
  h[0] = kShardMagic;
  h[1] = kShardVersion;
  h[2] = static_cast<int32_t>(tokens.size());
  write_all(path, h, reinterpret_cast<const char*>(tokens.data()), 2 * tokens.size());
}

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t found{};
  const int status = ::glob(pattern.c_str(), 0, nullptr, &found);
  std::vector<std::string> paths;
  if (status == 0) {
    for (size_t i = 0; i < found.gl_pathc; ++i) paths.emplace_back(found.gl_pathv[i]);
  }
  globfree(&found);
  if (paths.empty()) throw Error("no files match " + pattern, pattern);
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace zero::gpt
