#include "models/gpt/tokenizer.h"

#include <array>
#include <fstream>

#include "zero/error.h"

namespace zero::gpt {

Tokenizer Tokenizer::bytes() {
  Tokenizer t;
  for (int b = 0; b < 256; ++b) t.pieces_.emplace_back(1, static_cast<char>(b));
  return t;
}

Tokenizer Tokenizer::from_llmc(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the tokenizer file", path);
  std::array<uint32_t, 256> header{};
  if (!in.read(reinterpret_cast<char*>(header.data()), sizeof(header)))
    throw Error(path + ": truncated tokenizer header (1024 bytes expected)", path);
  if (header[0] != kTokenizerMagic)
    throw Error(path + ": header field magic = " + std::to_string(header[0]) + ", expected " +
                    std::to_string(kTokenizerMagic) + " (an llm.c tokenizer file)",
                path);
  if (header[1] != 1 && header[1] != 2)
    throw Error(path + ": header field version = " + std::to_string(header[1]) + ", expected 1 or 2", path);
  if (header[2] == 0 || header[2] > 1u << 20)
    throw Error(path + ": header field vocab_size = " + std::to_string(header[2]) + " is not plausible", path);
  Tokenizer t;
  t.eot_ = header[1] == 2 ? static_cast<int>(header[3]) : -1;
  for (uint32_t i = 0; i < header[2]; ++i) {
    unsigned char length = 0;
    if (!in.read(reinterpret_cast<char*>(&length), 1) || length == 0)
      throw Error(path + ": token " + std::to_string(i) + ": missing or zero length byte", path);
    std::string piece(length, '\0');
    if (!in.read(piece.data(), length)) throw Error(path + ": token " + std::to_string(i) + ": truncated bytes", path);
    t.pieces_.push_back(std::move(piece));
  }
  if (t.eot_ >= static_cast<int>(header[2]))
    throw Error(path + ": header field eot_token = " + std::to_string(t.eot_) + " is outside the vocabulary", path);
  return t;
}

std::string Tokenizer::decode(const std::vector<int64_t>& tokens) const {
  std::string out;
  for (int64_t token : tokens) {
    if (token >= 0 && token < vocab()) out += pieces_[static_cast<size_t>(token)];
  }
  return out;
}

std::string Tokenizer::printable(const std::string& text, bool ascii_only) {
  std::string out = text;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 32 && c != '\n' && c != '\t') || u == 127 || (ascii_only && u > 127)) c = '.';
  }
  return out;
}

}  // namespace zero::gpt
