// The BPE model of tokenizer.json: a word's characters (or, with byte_fallback, the <0xXX>
// tokens of a character the vocabulary lacks) merged pair by pair in the merges' rank order,
// lowest rank first and leftmost among equals, as the tokenizers library merges them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace zero::text {

// The largest token id (exclusive) a tokenizer with `entries` vocabulary entries may use: room for
// holes and added tokens, never more than an int32, so that a table indexed by id stays in
// proportion to the file.
inline int64_t max_token_id(int64_t entries) { return std::min<int64_t>(entries + (int64_t{1} << 20), INT32_MAX); }

class Bpe {
 public:
  Bpe(const nlohmann::json& model, const std::string& path);  // the "model" block

  void encode_word(const std::string& word, std::vector<int32_t>& ids) const;
  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  struct PairHash {
    size_t operator()(const std::pair<int32_t, int32_t>& p) const {
      return std::hash<uint64_t>()((static_cast<uint64_t>(static_cast<uint32_t>(p.first)) << 32) |
                                   static_cast<uint32_t>(p.second));
    }
  };
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>, PairHash> merges_;  // → (rank, id)
  int32_t unk_ = -1;
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  std::vector<int32_t> byte_ids_;  // <0xXX> → id, -1 where the vocabulary has none
};

}  // namespace zero::text
