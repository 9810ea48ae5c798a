#include "text/added_tokens.h"

#include <climits>
#include <deque>

#include "zero/error.h"

namespace zero::text {
namespace {

uint64_t edge_key(int32_t state, unsigned char byte) { return (static_cast<uint64_t>(state) << 8) | byte; }

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<std::string>& tokens) {
  size_t total = 0;  // states and lengths are int32: a file that could overflow them is refused
  for (const std::string& token : tokens) total += token.size();
  if (total >= static_cast<size_t>(INT32_MAX))
    throw Error("added_tokens: " + std::to_string(total) + " bytes of added tokens, more than a tokenizer may hold");
  states_.push_back({});  // the root: the empty string
  std::vector<std::vector<std::pair<unsigned char, int32_t>>> children(1);
  lengths_.reserve(tokens.size());
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& token = tokens[t];
    lengths_.push_back(static_cast<int32_t>(token.size()));
    if (token.empty()) continue;
    int32_t state = 0;
    for (size_t i = token.size(); i-- > 0;) {  // the token reversed
      const auto byte = static_cast<unsigned char>(token[i]);
      const auto [edge, added] = edges_.try_emplace(edge_key(state, byte), static_cast<int32_t>(states_.size()));
      if (added) {
        states_.push_back({.depth = states_[static_cast<size_t>(state)].depth + 1});
        children.emplace_back();
        children[static_cast<size_t>(state)].emplace_back(byte, edge->second);
      }
      state = edge->second;
    }
    int32_t& longest = states_[static_cast<size_t>(state)].longest;
    if (longest < 0) longest = static_cast<int32_t>(t);  // the first of tokens with this content
  }
  // Failure links, breadth first (a state's failure is shallower, so it is complete before the
  // state). A state's longest token is its own, else its failure's.
  std::deque<int32_t> queue;
  for (const auto& [byte, child] : children[0]) queue.push_back(child);  // failure: the root
  while (!queue.empty()) {
    const int32_t state = queue.front();
    queue.pop_front();
    State& s = states_[static_cast<size_t>(state)];
    if (s.longest < 0) s.longest = states_[static_cast<size_t>(s.failure)].longest;
    for (const auto& [byte, child] : children[static_cast<size_t>(state)]) {
      states_[static_cast<size_t>(child)].failure = next(s.failure, byte);
      queue.push_back(child);
    }
  }
}

int32_t AddedTokenMatcher::next(int32_t state, unsigned char byte) const {
  for (;;) {
    const auto edge = edges_.find(edge_key(state, byte));
    if (edge != edges_.end()) return edge->second;
    if (state == 0) return 0;
    state = states_[static_cast<size_t>(state)].failure;
  }
}

std::vector<AddedTokenMatcher::Match> AddedTokenMatcher::find_all(std::string_view text) const {
  std::vector<Match> matches;
  if (lengths_.empty() || text.empty()) return matches;
  // The longest token starting at each position: the automaton over the text from its end.
  std::vector<int32_t> starting(text.size());
  int32_t state = 0;
  for (size_t i = text.size(); i-- > 0;) {
    state = next(state, static_cast<unsigned char>(text[i]));
    starting[i] = states_[static_cast<size_t>(state)].longest;
  }
  for (size_t i = 0; i < text.size();) {
    const int32_t token = starting[i];
    if (token < 0) {
      ++i;
      continue;
    }
    const size_t end = i + static_cast<size_t>(lengths_[static_cast<size_t>(token)]);
    matches.push_back({i, end, token});
    i = end;
  }
  return matches;
}

}  // namespace zero::text
