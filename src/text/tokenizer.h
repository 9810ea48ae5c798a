// Hugging Face tokenizers from their own files: tokenizer.json (and tokenizer_config.json beside
// it), run as the `tokenizers` library runs them. Built: byte-level BPE (GPT-2, Llama 3, Qwen2,
// SmolLM) and SentencePiece-style BPE with byte fallback (Llama 2, Mistral); the normalizers,
// pre-tokenizers, decoders and post-processors those files use; added tokens matched in the raw
// text before anything else. A component a file uses that is not built is an error naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zero::text {

class Tokenizer {
 public:
  // FILE_OR_DIR: a tokenizer.json, or a directory holding one (and maybe tokenizer_config.json).
  static Tokenizer load(const std::string& file_or_dir);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // The ids of UTF-8 text (invalid sequences read as U+FFFD, as a browser or Node decodes them).
  // add_special: the post-processor's template (a BOS for Llama), as `encode(add_special_tokens)`.
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
  // The text of ids; skip_special leaves out special added tokens. With clean_up_spaces
  // (transformers' clean_up_tokenization_spaces) " ." becomes "." and so on.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false, bool clean_up_spaces = false) const;

  int32_t vocab_size() const;  // the model's vocabulary and the added tokens: one past the largest id
  std::optional<int32_t> token_to_id(const std::string& token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // From tokenizer_config.json where given; absent when neither file names one.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;
  bool clean_up_tokenization_spaces() const;  // tokenizer_config.json's, false when absent
  std::string chat_template() const;          // tokenizer_config.json's, empty when absent
  std::string config_path() const;            // the tokenizer_config.json read, empty when none

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// UTF-8 helpers shared by the pieces (src/text/utf8.cpp).
std::string valid_utf8(std::string_view bytes);  // invalid sequences → U+FFFD (maximal subparts)
std::vector<std::string_view> utf8_chars(std::string_view text);  // text must be valid UTF-8

}  // namespace zero::text
