// A tokenizer from a stranger (issue 37). The first byte chooses: even, the rest is tokenizer.json,
// loaded, then a text with special tokens, Unicode and invalid UTF-8 encoded (with and without the
// post-processor) and the ids decoded; odd, the rest is tokenizer_config.json beside a valid
// tokenizer.json, loaded, its tokens looked up and its chat template parsed.
#include "fuzz_input.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest = fuzz::as_text(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    const std::string path = fuzz::write_file("alone/tokenizer.json", rest);
    static const std::string kText =
        "Hello, world!  It's 2026: naïve café, 東京, emoji 🙂 <s> <|endoftext|> </s>\n\t12345 \xff\xfe tail  ";
    fuzz::only_clear_errors("Tokenizer", [&] {
      const zero::text::Tokenizer tokenizer = zero::text::Tokenizer::load(path);
      for (bool special : {false, true}) {
        const std::vector<int32_t> ids = tokenizer.encode(kText, special);
        (void)tokenizer.decode(ids, false, false);
        (void)tokenizer.decode(ids, true, true);
      }
      (void)tokenizer.decode({0, 1, 2, tokenizer.vocab_size() - 1, tokenizer.vocab_size(), -1}, false, true);
    });
  } else {
    static const std::string model = fuzz::write_file(
        "configured/tokenizer.json",
        R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
            "added_tokens": [{"id": 3, "content": "<s>", "special": true}, {"id": 4, "content": "</s>", "special": true}]})");
    fuzz::write_file("configured/tokenizer_config.json", rest);
    fuzz::only_clear_errors("tokenizer_config.json", [&] {
      const zero::text::Tokenizer tokenizer = zero::text::Tokenizer::load((fuzz::scratch() / "configured").string());
      (void)tokenizer.bos_id();
      (void)tokenizer.eos_id();
      (void)tokenizer.pad_id();
      (void)tokenizer.clean_up_tokenization_spaces();
      const std::string source = tokenizer.chat_template();
      if (!source.empty()) (void)zero::text::ChatTemplate(source);
    });
  }
  return 0;
}
