// The trainer's built-in corpus, so `zero-train` with no flags trains offline on any machine: a
// deterministic text of short English sentences from a small grammar ("the old farmer carries a
// basket to the market every morning.") mixed with about one line in ten of small sums ("17 + 25 = 42.").
// A byte model learns the spelling, the grammar and the digits' structure within a few hundred
// steps, so the falling loss and the samples show learning. Generated, not copied: the text is
// a function of the seed alone. Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace zero::gpt {

// About `bytes` bytes of corpus (whole lines), the same for the same seed on every machine.
std::string builtin_corpus(uint64_t seed, int64_t bytes);

}  // namespace zero::gpt
