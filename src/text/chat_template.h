// Hugging Face chat templates: the Jinja template a model ships in tokenizer_config.json's
// `chat_template`, rendered as transformers' apply_chat_template renders it (trim_blocks and
// lstrip_blocks on; raise_exception and strftime_now defined), byte for byte as Hugging Face's
// JavaScript renderer @huggingface/jinja does (the reference of the tests).
//
// The subset of Jinja that real templates use is implemented; anything else is refused when the
// template is parsed, with an error naming the construct and its line (docs/chat_templates.md).
//
//   ChatTemplate tmpl(tokenizer.chat_template());
//   std::string prompt = tmpl.render({{"messages", messages}, {"bos_token", "<s>"},
//                                     {"add_generation_prompt", true}});
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "zero/error.h"

namespace zero::text {

// What a template's raise_exception(message) throws: what() is the template's message.
class ChatTemplateRaise : public Error {
 public:
  explicit ChatTemplateRaise(const std::string& message) : Error(message, "raise_exception") {}
};

// Where a render wrote each message of the context's "messages": the output of the loop iteration
// that had the message as its item, as [begin, end) in the rendered text. A message that no loop
// wrote from stays unset; one written by two iterations that both wrote something makes the spans
// ambiguous (an iteration that wrote nothing, as in a loop that only checks the messages, counts
// only where there is no other).
struct MessageSpans {
  static constexpr size_t kUnset = static_cast<size_t>(-1);
  std::vector<std::pair<size_t, size_t>> spans;  // per message, {kUnset, kUnset} when unset
  bool ambiguous = false;
};

class ChatTemplate {
 public:
  // Parses once; render many times. Errors are zero::Error naming the construct and the line.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // `context` is a JSON object whose keys become the template's variables: messages,
  // bos_token, eos_token, add_generation_prompt, tools, date_string, ...
  // Note: an ordered_json, because key order shows in tojson's output (a tool's schema prints
  // in the order it was written); an nlohmann::json converts to it with its keys sorted.
  // With `spans`, also where each message was written (for masking from one render).
  std::string render(const nlohmann::ordered_json& context, MessageSpans* spans = nullptr) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zero::text
