#include "text/bpe.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>

#include "text/tokenizer.h"
#include "util/json_from_file.h"
#include "zero/error.h"

namespace zero::text {
namespace {

// A symbol of the word being merged: a doubly linked list over the initial symbols; a merged
// symbol's right half is emptied (len 0) and unlinked.
struct Symbol {
  int32_t id;
  int prev, next;
  size_t len;
};

struct Candidate {
  int32_t rank;
  int pos;
  int32_t id;
  bool operator<(const Candidate& other) const {  // std::priority_queue pops the largest: invert
    return rank != other.rank ? rank > other.rank : pos > other.pos;
  }
};

}  // namespace

Bpe::Bpe(const nlohmann::json& model, const std::string& path) {
  const auto refuse = [&](const std::string& key, const std::string& what) {
    throw Error(path + "." + key + ": " + what + " is not supported by zerocpp's tokenizer", path + "." + key);
  };
  const std::string type = json_field<std::string>(model, "type", "BPE", path);
  if (type != "BPE") refuse("type", "the model \"" + type + "\" (BPE is)");
  if (json_field<double>(model, "dropout", 0.0, path) != 0.0) refuse("dropout", "BPE dropout");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!json_field<std::string>(model, key, "", path).empty()) refuse(key, "a value");
  // Ids are checked before anything is sized by them: a 392-byte file with one id of 1e8 would
  // otherwise ask for an id table of gigabytes, and an id of 2^40 + 1 would wrap to 1.
  if (!model.contains("vocab")) throw Error(path + ".vocab: is required", path + ".vocab");
  const nlohmann::json& vocab = model["vocab"];
  if (!vocab.is_object()) throw Error(path + ".vocab: not a JSON object of token → id", path + ".vocab");
  const int64_t limit = max_token_id(static_cast<int64_t>(vocab.size()));
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= limit)
      throw Error(path + ".vocab[\"" + token.substr(0, 80) + "\"]: id " + id.dump().substr(0, 40) + " is not in [0, " +
                      std::to_string(limit) + ") (the vocabulary has " + std::to_string(vocab.size()) + " entries)",
                  path + ".vocab");
    vocab_.emplace(token, static_cast<int32_t>(id.get<int64_t>()));
  }
  byte_fallback_ = json_field<bool>(model, "byte_fallback", false, path);
  fuse_unk_ = json_field<bool>(model, "fuse_unk", false, path);
  ignore_merges_ = json_field<bool>(model, "ignore_merges", false, path);
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    const std::string unk = json_required<std::string>(model, "unk_token", path);
    const auto it = vocab_.find(unk);
    if (it == vocab_.end()) throw Error(path + ".unk_token: \"" + unk + "\" is not in the vocabulary", path);
    unk_ = it->second;
  }
  byte_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const auto it = vocab_.find(name);
    if (it != vocab_.end()) byte_ids_[static_cast<size_t>(b)] = it->second;
  }
  if (model.contains("merges") && !model["merges"].is_array())
    throw Error(path + ".merges: must be a list", path + ".merges");
  static const nlohmann::json kNoMerges = nlohmann::json::array();
  const nlohmann::json& merges = model.contains("merges") ? model["merges"] : kNoMerges;
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    std::string left, right;
    if (merges[rank].is_string()) {  // "a b"
      const std::string line = merges[rank].get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        throw Error(path + ".merges[" + std::to_string(rank) + "]: expected two tokens, got \"" + line + "\"", path);
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (merges[rank].is_array() && merges[rank].size() == 2 && merges[rank][0].is_string() &&
               merges[rank][1].is_string()) {  // ["a", "b"]
      left = merges[rank][0].get<std::string>();
      right = merges[rank][1].get<std::string>();
    } else {
      throw Error(path + ".merges[" + std::to_string(rank) + "]: expected \"a b\" or [\"a\", \"b\"]", path);
    }
    const auto a = vocab_.find(left), b = vocab_.find(right), merged = vocab_.find(left + right);
    if (a == vocab_.end() || b == vocab_.end() || merged == vocab_.end())
      throw Error(path + ".merges[" + std::to_string(rank) + "]: \"" + left + "\", \"" + right +
                      "\" or their merge is not in the vocabulary",
                  path);
    merges_.try_emplace({a->second, b->second}, static_cast<int32_t>(rank), merged->second);
  }
}

void Bpe::encode_word(const std::string& word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {  // a word the vocabulary has whole is one token, whatever the merges say
    const auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  std::vector<Symbol> symbols;
  bool last_unk = false;
  const auto add = [&](int32_t id, size_t len) {
    const int n = static_cast<int>(symbols.size());
    symbols.push_back({id, n - 1, -1, len});
    if (n > 0) symbols[static_cast<size_t>(n - 1)].next = n;
  };
  for (std::string_view c : utf8_chars(word)) {
    const auto it = vocab_.find(std::string(c));
    if (it != vocab_.end()) {
      add(it->second, c.size());
      last_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : c) all = all && byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : c) add(byte_ids_[b], 1);
        last_unk = false;
        continue;
      }
    }
    if (unk_ < 0)
      throw Error("the tokenizer has no unk_token for \"" + std::string(c) + "\", which its vocabulary lacks");
    if (fuse_unk_ && last_unk) {
      symbols.back().len += c.size();
    } else {
      add(unk_, c.size());
    }
    last_unk = true;
  }
  std::priority_queue<Candidate> queue;
  const auto consider = [&](int pos) {
    const Symbol& s = symbols[static_cast<size_t>(pos)];
    if (s.next < 0) return;
    const auto it = merges_.find({s.id, symbols[static_cast<size_t>(s.next)].id});
    if (it != merges_.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (left.len == 0 || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    const auto it = merges_.find({left.id, right.id});
    if (it == merges_.end() || it->second.second != top.id) continue;  // stale: a neighbour changed
    left.id = top.id;
    left.len += right.len;
    left.next = right.next;
    right.len = 0;
    if (left.next >= 0) symbols[static_cast<size_t>(left.next)].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (int i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) ids.push_back(symbols[static_cast<size_t>(i)].id);
}

}  // namespace zero::text
