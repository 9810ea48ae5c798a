#include "models/finetune/chat_example.h"

#include <fmt/core.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "zero/error.h"

namespace zero::finetune {
namespace {

using json = nlohmann::ordered_json;

bool starts_with(const std::vector<int32_t>& ids, const std::vector<int32_t>& prefix) {
  return prefix.size() <= ids.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

// Masking a conversation renders its prefix before and after each assistant turn (as TRL's
// prefix masking does, so that every template's turns are told apart the same way): the work
// grows with the square of its length. A record of more messages than this is refused at once
// rather than taking minutes (8 000 messages took more than 30 s).
constexpr size_t kMaxMessagesPerRecord = 1024;

void check_messages(const json& messages, const std::string& where) {
  if (!messages.is_array() || messages.empty()) throw Error(where + ": \"messages\" must be a non-empty array", where);
  if (messages.size() > kMaxMessagesPerRecord)
    throw Error(fmt::format("{}: {} messages in one record, more than the {} a record may hold (masking renders "
                            "every prefix of the conversation: split it)",
                            where, messages.size(), kMaxMessagesPerRecord),
                where);
  bool any_assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string at = fmt::format("{}: messages[{}]", where, i);
    if (!m.is_object()) throw Error(at + " must be an object with \"role\" and \"content\"", where);
    for (const char* key : {"role", "content"}) {
      if (!m.contains(key) || !m[key].is_string()) throw Error(fmt::format("{}: \"{}\" must be a string", at, key), where);
    }
    any_assistant = any_assistant || m["role"] == "assistant";
  }
  if (!any_assistant) throw Error(where + ": no \"assistant\" message, so nothing to learn", where);
}

}  // namespace

ChatRenderer::ChatRenderer(const text::Tokenizer& tokenizer) : tokenizer_(tokenizer) {
  const std::string source = tokenizer.chat_template();
  if (source.empty()) {
    throw Error("the data set has chat \"messages\" but the tokenizer has no chat_template (tokenizer_config.json)",
                "chat_template");
  }
  template_ = std::make_unique<text::ChatTemplate>(source);
  if (const auto id = tokenizer.bos_id()) bos_ = tokenizer.id_to_token(*id).value_or("");
  if (const auto id = tokenizer.eos_id()) eos_ = tokenizer.id_to_token(*id).value_or("");
}

ChatRenderer::~ChatRenderer() = default;
ChatRenderer::ChatRenderer(ChatRenderer&&) noexcept = default;

Example ChatRenderer::example(const json& messages, const std::string& where) const {
  check_messages(messages, where);
  auto ids_of = [&](size_t count, bool generation_prompt) {
    const json context = {{"messages", json(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(count))},
                          {"bos_token", bos_},
                          {"eos_token", eos_},
                          {"add_generation_prompt", generation_prompt}};
    try {
      return tokenizer_.encode(template_->render(context), false);
    } catch (const Error& e) {
      throw Error(where + ": chat_template: " + e.what(), where);
    }
  };
  Example example;
  example.ids = ids_of(messages.size(), false);
  example.labels.assign(example.ids.size(), kIgnoreIndex);
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    const std::vector<int32_t> before = ids_of(i, true), through = ids_of(i + 1, false);
    if (!starts_with(through, before) || !starts_with(example.ids, through)) {
      throw Error(fmt::format("{}: the chat_template renders messages[{}] so that the conversation before it is not "
                              "a prefix of the whole (its turns cannot be told apart)",
                              where, i),
                  where);
    }
    std::copy(example.ids.begin() + static_cast<std::ptrdiff_t>(before.size()),
              example.ids.begin() + static_cast<std::ptrdiff_t>(through.size()),
              example.labels.begin() + static_cast<std::ptrdiff_t>(before.size()));
  }
  return example;
}

}  // namespace zero::finetune
