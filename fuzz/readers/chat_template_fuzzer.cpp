// A chat template from a stranger's tokenizer_config.json (issue 37): a program, parsed and run
// on a conversation with a system prompt, tools and a generation prompt. Its budgets (steps,
// output, nesting) keep every run bounded.
#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "What is 2+2? Use the tool."},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
      {"role": "tool", "content": "4"},
      {"role": "assistant", "content": "It is 4."},
      {"role": "user", "content": "Thanks"}],
    "tools": [{"type": "function", "function": {"name": "add", "description": "Adds", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}],
    "bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true, "date_string": "27 Nov 2026"})");
  const std::string source(fuzz::as_text(data, size));
  fuzz::only_clear_errors("ChatTemplate", [&] { (void)zero::text::ChatTemplate(source).render(context); });
  return 0;
}
