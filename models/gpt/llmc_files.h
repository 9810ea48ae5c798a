// llm.c's file formats, read and written strictly (torch-free).
//
// Model checkpoint: 256 int32 header — magic 20240326, version 3 (fp32), maxT, V, L, NH, C, Vp in
// slots 0–7 — then every parameter as one flat fp32 array, grouped by tensor kind across layers:
// wte (Vp,C), wpe (maxT,C), ln1w (L,C), ln1b (L,C), qkvw (L,3C,C), qkvb (L,3C), attprojw (L,C,C),
// attprojb (L,C), ln2w (L,C), ln2b (L,C), fcw (L,4C,C), fcb (L,4C), fcprojw (L,C,4C), fcprojb (L,C),
// lnfw (C), lnfb (C).
//
// Token shard: 256 int32 header — magic 20240520, version 1, token count N — then N uint16 tokens;
// the file is exactly 1024 + 2N bytes.
//
// Every problem is a zero::Error naming the file and the field (and the position of a bad token).
#pragma once

#include <array>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace zero::gpt {

struct GptShape {
  int max_seq = 0;       // maxT
  int vocab = 0;         // V
  int layers = 0;        // L
  int heads = 0;         // NH
  int channels = 0;      // C
  int padded_vocab = 0;  // Vp
  bool operator==(const GptShape&) const = default;
};

// One named tensor of the flat checkpoint array, in file order.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // elements from the start of the parameter array
  int64_t numel() const;
};

// The 16 tensors of a checkpoint, in file order, with their offsets.
std::vector<TensorSpec> checkpoint_tensors(const GptShape& shape);
int64_t checkpoint_numel(const GptShape& shape);
// Whether a tensor holds one slice per layer (all but wte, wpe, lnfw, lnfb).
bool per_layer(const TensorSpec& spec);

struct LlmcCheckpoint {
  GptShape shape;
  std::vector<float> params;  // checkpoint_numel(shape) values, in file order
};

LlmcCheckpoint read_llmc_checkpoint(const std::string& path);
void write_llmc_checkpoint(const std::string& path, const GptShape& shape, const std::vector<float>& params);

// Streams a checkpoint out: the header, then the parameters in file order in pieces of any size;
// finish() checks the count and renames the file into place (written as PATH.tmp until then).
class LlmcCheckpointWriter {
 public:
  LlmcCheckpointWriter(std::string path, const GptShape& shape);
  ~LlmcCheckpointWriter();
  void append(const float* values, int64_t count);
  void finish();

 private:
  std::string path_;
  int64_t expected_ = 0, written_ = 0;
  std::ofstream out_;
};

std::vector<uint16_t> read_token_shard(const std::string& path, int vocab);
void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens);
// The files a glob pattern names, sorted; an error naming the pattern when there are none.
std::vector<std::string> expand_glob(const std::string& pattern);

inline constexpr int32_t kCheckpointMagic = 20240326;
inline constexpr int32_t kCheckpointVersionFp32 = 3;
inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;

}  // namespace zero::gpt
