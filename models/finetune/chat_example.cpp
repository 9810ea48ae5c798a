#include "models/finetune/chat_example.h"

#include <fmt/core.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "zero/error.h"

namespace zero::finetune {
namespace {

using json = nlohmann::ordered_json;

bool starts_with(const std::vector<int32_t>& ids, const std::vector<int32_t>& prefix) {
  return prefix.size() <= ids.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

// The prefix method (ChatRenderer::from_prefixes) renders the conversation before and after each
// assistant turn: its work grows with the square of the conversation. Where it is needed, a
// record of more messages than this is refused at once rather than taking minutes (8 000
// messages took more than 30 s).
constexpr size_t kMaxMessagesPerRecord = 1024;

void check_messages(const json& messages, const std::string& where) {
  if (!messages.is_array() || messages.empty()) throw Error(where + ": \"messages\" must be a non-empty array", where);
  bool any_assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string at = fmt::format("{}: messages[{}]", where, i);
    if (!m.is_object()) throw Error(at + " must be an object with \"role\" and \"content\"", where);
    for (const char* key : {"role", "content"}) {
      if (!m.contains(key) || !m[key].is_string())
        throw Error(fmt::format("{}: \"{}\" must be a string", at, key), where);
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
  // The template is a stranger's program: its errors name the file it came from.
  origin_ = tokenizer.config_path() + ": chat_template";
  try {
    template_ = std::make_unique<text::ChatTemplate>(source);
  } catch (const Error& e) {
    throw Error(origin_ + ": " + e.what(), "chat_template");
  }
  if (const auto id = tokenizer.bos_id()) bos_ = tokenizer.id_to_token(*id).value_or("");
  if (const auto id = tokenizer.eos_id()) eos_ = tokenizer.id_to_token(*id).value_or("");
}

ChatRenderer::~ChatRenderer() = default;
ChatRenderer::ChatRenderer(ChatRenderer&&) noexcept = default;

std::string ChatRenderer::render(const json& messages, size_t count, bool generation_prompt, const std::string& where,
                                 text::MessageSpans* spans) const {
  const json context = {{"messages", json(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(count))},
                        {"bos_token", bos_},
                        {"eos_token", eos_},
                        {"add_generation_prompt", generation_prompt}};
  try {
    return template_->render(context, spans);
  } catch (const Error& e) {
    throw Error(where + ": " + origin_ + ": " + e.what(), where);
  }
}

Example ChatRenderer::example(const json& messages, const std::string& where, Masking masking) const {
  check_messages(messages, where);
  if (masking != Masking::kPrefixes) {
    if (std::optional<Example> example = from_one_render(messages, where)) return std::move(*example);
    if (masking == Masking::kOneRenderOnly)
      throw Error(where + ": " + origin_ + ": its assistant turns cannot be found in one render", where);
  }
  return from_prefixes(messages, where);
}

// The conversation rendered once, with where the template wrote each message (MessageSpans). An
// assistant turn is learned from the end of its generation prompt to the end of what the template
// wrote for it: the tokens the prefix method below labels, found without rendering every prefix.
// The generation prompt is what the conversation before the first assistant turn, rendered with
// add_generation_prompt, adds to the whole's text before that turn, and every turn must begin
// with it. That the prefixes are the whole's beginnings is checked at the first and the last
// assistant turn (the conversation before each with the prompt, and through each): a template whose text depends on
// what comes after (loop.last, an end-of-text after the loop for a conversation that ends with the assistant) differs
// there. The text is tokenized in pieces cut at those bounds, which must give the whole's tokens. Anything else (an
// assistant message written twice or outside a loop over the messages, a turn that does not begin with the prompt, a
// token across a bound) leaves it to the prefix method.
std::optional<Example> ChatRenderer::from_one_render(const json& messages, const std::string& where) const {
  text::MessageSpans written;
  const std::string whole = render(messages, messages.size(), false, where, &written);
  std::vector<size_t> assistants;
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i]["role"] == "assistant") assistants.push_back(i);
  if (written.ambiguous) return std::nullopt;
  size_t previous_end = 0;
  for (size_t i : assistants) {
    const auto [begin, end] = written.spans[i];
    if (begin == text::MessageSpans::kUnset || begin < previous_end || end < begin || end > whole.size())
      return std::nullopt;
    previous_end = end;
  }
  const auto is_beginning = [&](const std::string& text, size_t length) {
    return text.size() == length && whole.compare(0, length, text) == 0;
  };
  std::string prompt;
  for (size_t i : {assistants.front(), assistants.back()}) {
    const auto [begin, end] = written.spans[i];
    const std::string prompted = render(messages, i, true, where);
    if (prompted.size() < begin || prompted.compare(0, begin, whole, 0, begin) != 0) return std::nullopt;
    if (i == assistants.front()) prompt = prompted.substr(begin);
    if (prompted.size() != begin + prompt.size() || prompted.compare(begin, prompt.size(), prompt) != 0)
      return std::nullopt;
    if (!is_beginning(render(messages, i + 1, false, where), end)) return std::nullopt;
  }

  Example example;
  std::vector<int32_t> pieces;
  const auto add = [&](size_t begin, size_t end, bool learned) {
    for (int32_t id : tokenizer_.encode(std::string_view(whole).substr(begin, end - begin), false)) {
      pieces.push_back(id);
      example.labels.push_back(learned ? id : kIgnoreIndex);
    }
  };
  size_t at = 0;
  for (size_t i : assistants) {
    const auto [begin, end] = written.spans[i];
    if (end - begin < prompt.size() || whole.compare(begin, prompt.size(), prompt) != 0) return std::nullopt;
    add(at, begin + prompt.size(), false);
    add(begin + prompt.size(), end, true);
    at = end;
  }
  add(at, whole.size(), false);
  example.ids = tokenizer_.encode(whole, false);
  if (example.ids != pieces) return std::nullopt;
  return example;
}

// Each assistant turn i rendered as the conversation before it with the generation prompt, and
// through it (as TRL's prefix masking does, so that every template's turns are told apart the
// same way): the work grows with the square of the conversation, hence the bound on messages.
Example ChatRenderer::from_prefixes(const json& messages, const std::string& where) const {
  if (messages.size() > kMaxMessagesPerRecord)
    throw Error(fmt::format("{}: {} messages in one record, more than the {} a record may hold when its turns are "
                            "told apart by rendering every prefix of the conversation (the chat template does not "
                            "write each message in one loop over them): split it",
                            where, messages.size(), kMaxMessagesPerRecord),
                where);
  auto ids_of = [&](size_t count, bool generation_prompt) {
    return tokenizer_.encode(render(messages, count, generation_prompt, where), false);
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
