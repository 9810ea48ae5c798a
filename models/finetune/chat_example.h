// Chat `messages` as a training row: the conversation rendered with the model's chat_template
// (transformers' apply_chat_template: the template writes any BOS itself, so no special tokens are
// added), learning only the assistant turns.
#pragma once

#include <memory>
#include <optional>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "models/finetune/instruction_data.h"

namespace zero::text {
class ChatTemplate;
struct MessageSpans;
}

namespace zero::finetune {

class ChatRenderer {
 public:
  // An error when the tokenizer has no chat_template.
  explicit ChatRenderer(const text::Tokenizer& tokenizer);
  ~ChatRenderer();
  ChatRenderer(ChatRenderer&&) noexcept;

  // Each assistant turn i is learned: its tokens are those the conversation up to and including
  // it adds to the conversation before it with the generation prompt. Errors name `where`.
  // Found in one render of the conversation where the template allows (linear in its length),
  // else by rendering each turn's prefixes. kPrefixes always renders the prefixes (the reference
  // the tests hold the one render to); kOneRenderOnly never does (an error where it would).
  enum class Masking { kOneRender, kOneRenderOnly, kPrefixes };
  Example example(const nlohmann::ordered_json& messages, const std::string& where,
                  Masking masking = Masking::kOneRender) const;

 private:
  std::string render(const nlohmann::ordered_json& messages, size_t count, bool generation_prompt,
                     const std::string& where, text::MessageSpans* spans = nullptr) const;
  std::optional<Example> from_one_render(const nlohmann::ordered_json& messages, const std::string& where) const;
  Example from_prefixes(const nlohmann::ordered_json& messages, const std::string& where) const;

  const text::Tokenizer& tokenizer_;
  std::unique_ptr<text::ChatTemplate> template_;
  std::string origin_;  // "DIR/tokenizer_config.json: chat_template", for errors
  std::string bos_, eos_;
};

}  // namespace zero::finetune
