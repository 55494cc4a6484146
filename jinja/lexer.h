// Jinja's lexer with the settings HuggingFace uses for chat templates:
// trim_blocks (a block or comment tag eats the newline after it),
// lstrip_blocks (indentation before a block or comment tag on its own line
// is dropped), `-`/`+` whitespace control on every tag, newlines normalised
// to "\n" and one trailing newline dropped (keep_trailing_newline=False).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moelsp::jinja {

enum class Tok : uint8_t { Text, BlockBegin, BlockEnd, VarBegin, VarEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type = Tok::Eof;
  std::string text;  // Text: the data; Name/Op: as written; String: the decoded value
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0;
};

// Throws Error (with the line) for an unterminated tag, comment or string.
std::vector<Token> lex(std::string_view source);

}  // namespace moelsp::jinja
