// ChatTemplate: a parsed template (jinja_lexer, jinja_parser) and its renderer (jinja_eval).
#include "text/chat_template.h"

#include "text/jinja/ast.h"
#include "text/jinja/eval.h"
#include "text/jinja/lexer.h"

namespace zero::text {

struct ChatTemplate::Impl {
  jinja::Nodes program;
};

ChatTemplate::ChatTemplate(const std::string& source)
    : impl_(std::make_unique<Impl>(Impl{jinja::parse(jinja::tokenize(source))})) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& context, MessageSpans* spans) const {
  return jinja::render(impl_->program, context, spans);
}

}  // namespace zero::text
