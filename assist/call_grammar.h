// The grammar of tool calls in a model family's own syntax (tool_calls.h
// lists them), for the tools a request offers: each call names one of them
// and its arguments match that tool's JSON Schema (json_schema.h). Used
// lazily — the text stays free until the family's call opening appears,
// then the call is constrained to its end (llama.cpp's lazy grammars) — and
// from the start when the client forces a call (tool_choice required or
// named), where the answer already begins with the opening.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "assist/tool_calls.h"

namespace moelsp::assist {

struct CallGrammarInput {
  ToolSyntax syntax = ToolSyntax::None;
  std::string tools_json;  // OpenAI's [{type, function: {name, parameters}}] or bare [{name, parameters}]
  std::string only;        // a named tool_choice: calls of this tool only
  bool parallel = true;    // more than one call in an answer
};

struct CallGrammar {
  std::string gbnf;                   // root: one call or more, opening included
  std::vector<std::string> triggers;  // the openings that start a call
};

// nullopt for ToolSyntax::None and when no tool is usable (no tools, or the
// named one is not among them). A tool whose schema cannot be compiled gets
// any JSON object for its arguments (logged): its calls stay possible.
std::optional<CallGrammar> call_grammar(const CallGrammarInput& in);

}  // namespace moelsp::assist
