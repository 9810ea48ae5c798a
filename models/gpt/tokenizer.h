// Turning token ids back into text for the trainer's samples (torch-free).
//
// Bytes (V = 256) decode as themselves. An llm.c tokenizer file (gpt2_tokenizer.bin) decodes GPT-2
// tokens: a header of 256 uint32 — magic 20240328, version 1 or 2, vocabulary size, and (version 2)
// the end-of-text token — then, per token, a uint8 length (at least 1) and that many bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zero::gpt {

class Tokenizer {
 public:
  // Token t is the byte t.
  static Tokenizer bytes();
  // Reads an llm.c tokenizer file; an error naming the file and the field when it is malformed.
  static Tokenizer from_llmc(const std::string& path);

  int vocab() const { return static_cast<int>(pieces_.size()); }
  // The end-of-text token, or -1 when the file does not name one.
  int eot() const { return eot_; }
  std::string decode(const std::vector<int64_t>& tokens) const;
  // For a terminal: control bytes other than newline and tab shown as '.', and with ascii_only
  // (a byte model, whose output need not be UTF-8) every byte above 126 as well.
  static std::string printable(const std::string& text, bool ascii_only);

 private:
  std::vector<std::string> pieces_;
  int eot_ = -1;
};

inline constexpr uint32_t kTokenizerMagic = 20240328;

}  // namespace zero::gpt
