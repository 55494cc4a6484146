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

// A grammar for an answer (response_format's JSON) that lets a model of
// `syntax` reason first where its family does: "<think>…</think>" before
// the answer — or, when the prompt already opened the reasoning (`opened`:
// it ends with <think>), "…</think>". The reasoning is free text up to its
// close; the answer after it matches `gbnf`'s root. Other families (and
// gpt-oss's channels, not yet) get `gbnf`'s root alone. The root of the
// result is `answer-root`.
bool reasons_in_think(ToolSyntax syntax);
std::string with_reasoning(ToolSyntax syntax, const std::string& gbnf, bool opened);

}  // namespace moelsp::assist
