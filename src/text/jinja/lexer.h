// Tokens of a chat template, cut as the reference renderer (@huggingface/jinja) cuts them, after
// Hugging Face's options trim_blocks and lstrip_blocks (see jinja/lexer.cpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace zero::text::jinja {

enum class Tok {
  Text, Number, String, Name, Equals, OpenParen, CloseParen, OpenStatement, CloseStatement,
  OpenExpression, CloseExpression, OpenBracket, CloseBracket, OpenBrace, CloseBrace, Comma, Dot,
  Colon, Pipe, Additive, Multiplicative, Power, Comparison, Unary, Comment
};

struct Token {
  Tok type;
  std::string value;  // a string literal's value unescaped, a number's digits, a text's bytes
  int line;           // in the template as written
};

// Errors are zero::Error naming the line.
std::vector<Token> tokenize(std::string_view source);

}  // namespace zero::text::jinja
