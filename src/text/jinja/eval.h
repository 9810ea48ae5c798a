// Running a parsed chat template (jinja/ast.h) over a context, as the reference renderer does.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "text/chat_template.h"
#include "text/jinja/ast.h"

namespace zero::text::jinja {

// Errors are zero::Error naming what failed and the line; raise_exception throws ChatTemplateRaise.
// With `spans`: where each of context["messages"] was written (MessageSpans).
std::string render(const Nodes& program, const nlohmann::ordered_json& context, MessageSpans* spans = nullptr);

}  // namespace zero::text::jinja
