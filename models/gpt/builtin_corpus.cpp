#include "models/gpt/builtin_corpus.h"

#include <array>
#include <random>
#include <string_view>

namespace zero::gpt {
namespace {

constexpr std::array<std::string_view, 10> kSubjects = {
    "the cat",        "a dog",     "the old farmer", "my sister",      "the little bird",
    "a tired sailor", "the baker", "our teacher",    "the young king", "a small child"};
constexpr std::array<std::string_view, 10> kVerbs = {"sees",   "likes", "follows", "finds",   "carries",
                                                     "paints", "keeps", "loses",   "watches", "brings"};
constexpr std::array<std::string_view, 10> kObjects = {"a red ball",    "the green apple", "an old map",     "a basket",
                                                       "the blue boat", "a warm loaf",     "the silver key", "a letter",
                                                       "the lantern",   "a wooden box"};
constexpr std::array<std::string_view, 8> kPlaces = {"in the garden",  "by the river",    "at the market",
                                                     "under the tree", "near the house",  "on the hill",
                                                     "to the market",  "across the field"};
constexpr std::array<std::string_view, 6> kTimes = {"every morning", "at night",  "on sunday",
                                                    "after dinner",  "in winter", "before the rain"};

template <size_t N>
std::string_view pick(const std::array<std::string_view, N>& words, std::mt19937_64& rng) {
  return words[static_cast<size_t>(rng() % N)];
}

std::string sentence(std::mt19937_64& rng) {
  std::string s;
  switch (rng() % 4) {
    case 0:
      s = std::string(pick(kSubjects, rng)) + " " + std::string(pick(kVerbs, rng)) + " " +
          std::string(pick(kObjects, rng)) + " " + std::string(pick(kPlaces, rng));
      break;
    case 1:
      s = std::string(pick(kSubjects, rng)) + " " + std::string(pick(kVerbs, rng)) + " " +
          std::string(pick(kObjects, rng)) + " " + std::string(pick(kTimes, rng));
      break;
    case 2:
      s = std::string(pick(kTimes, rng)) + " " + std::string(pick(kSubjects, rng)) + " " +
          std::string(pick(kVerbs, rng)) + " " + std::string(pick(kObjects, rng));
      break;
    default: {
      const auto a = rng() % 50, b = rng() % 50;
      return std::to_string(a) + " + " + std::to_string(b) + " = " + std::to_string(a + b) + ".";
    }
  }
  return s + ".";
}

}  // namespace

std::string builtin_corpus(uint64_t seed, int64_t bytes) {
  std::mt19937_64 rng(seed);
  std::string text;
  text.reserve(static_cast<size_t>(bytes) + 128);
  while (static_cast<int64_t>(text.size()) < bytes) {
    // A paragraph of 2-5 lines; a sum drawn is kept one time in five, so about one line in ten is a sum.
    const auto lines = 2 + rng() % 4;
    for (uint64_t i = 0; i < lines; ++i) {
      std::string line = sentence(rng);
      if (rng() % 5 != 0 && line.find('=') != std::string::npos) line = sentence(rng);
      text += line;
      text += '\n';
    }
    text += '\n';
  }
  return text;
}

}  // namespace zero::gpt
