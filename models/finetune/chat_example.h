// Chat `messages` as a training row: the conversation rendered with the model's chat_template
// (transformers' apply_chat_template: the template writes any BOS itself, so no special tokens are
// added), learning only the assistant turns.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "models/finetune/instruction_data.h"

namespace zero::text {
class ChatTemplate;
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
  Example example(const nlohmann::ordered_json& messages, const std::string& where) const;

 private:
  const text::Tokenizer& tokenizer_;
  std::unique_ptr<text::ChatTemplate> template_;
  std::string bos_, eos_;
};

}  // namespace zero::finetune
