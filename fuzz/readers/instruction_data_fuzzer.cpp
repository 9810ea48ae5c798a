// Instruction data from a stranger (issue 37): a JSONL or JSON file of alpaca and chat records,
// read and tokenized (chat records rendered with a ChatML template) at model_max_length 64. The
// tokenizer is a byte-level one written here: every byte has a token, so any text encodes.
#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "models/finetune/instruction_data.h"
#include "text/tokenizer.h"

namespace {

const zero::text::Tokenizer& byte_tokenizer() {
  static const zero::text::Tokenizer tokenizer = [] {
    nlohmann::json vocab = nlohmann::json::object();
    char name[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      vocab[name] = b;
    }
    const nlohmann::json doc = {
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}, {"byte_fallback", true}}},
        {"added_tokens",
         {{{"id", 256}, {"content", "<|im_start|>"}, {"special", true}},
          {{"id", 257}, {"content", "<|im_end|>"}, {"special", true}}}}};
    const nlohmann::json config = {
        {"eos_token", "<|im_end|>"},
        {"chat_template",
         "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}};
    fuzz::write_file("tokenizer/tokenizer.json", doc.dump());
    fuzz::write_file("tokenizer/tokenizer_config.json", config.dump());
    return zero::text::Tokenizer::load((fuzz::scratch() / "tokenizer").string());
  }();
  return tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const zero::text::Tokenizer& tokenizer = byte_tokenizer();
  const std::string path = fuzz::write_file("data.jsonl", fuzz::as_text(data, size));
  fuzz::only_clear_errors("read_instruction_data", [&] {
    (void)zero::finetune::read_instruction_data(path, tokenizer, 64);
  });
  return 0;
}
