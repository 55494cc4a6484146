// Tool calls and reasoning parsed from a model's own output, per family of
// chat template (the family is read off the template, as llama.cpp does):
//
//   hermes       <tool_call>{"name": N, "arguments": {...}}</tool_call>         Qwen2.5, Qwen3
//   qwen3-coder  <tool_call><function=N><parameter=K>V</parameter>…</function></tool_call>
//   glm          <tool_call>N<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>   GLM-4.5…5
//
// and <think>…</think> split out as reasoning. Streaming-safe: push() gives
// back the text that can be shown now — text before a call is never held
// back longer than a possible opening tag — and each call once its closing
// tag has arrived. Parameter values of the XML families are strings on the
// wire; they are typed by the tool's JSON schema (a string where the schema
// says string, else the JSON they spell, else the string). A call that does
// not parse comes back as text, with a warning in the log: never an error.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moelsp::assist {

enum class ToolSyntax { None, Hermes, Qwen3Coder, Glm };
const char* to_string(ToolSyntax s);

// The syntax a chat template teaches its model (None when it shows none).
ToolSyntax tool_syntax_for_template(std::string_view chat_template);

// The text that opens a call in `syntax` — of the tool `name`, or of any
// tool when `name` is empty — for an answer made to start with a call
// (tool_choice required or named); "" for None. Fed to the OutputParser
// ahead of the model's text, it puts the parser inside the call.
std::string call_opening(ToolSyntax syntax, std::string_view name);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, compact (OpenAI's `arguments` string)
  bool operator==(const ToolCall&) const = default;
};

// What a piece of output adds: text to show, reasoning, finished calls.
struct OutputDelta {
  std::string content, reasoning;
  std::vector<ToolCall> calls;
  bool empty() const { return content.empty() && reasoning.empty() && calls.empty(); }
};

class OutputParser {
 public:
  // `tools_json`: the request's tools (OpenAI's [{type, function: {name,
  // parameters}}] or bare {name, parameters}), for typing values; may be "".
  // `in_reasoning`: the prompt already opened <think> (a template that
  // ends the generation prompt with it), so output starts as reasoning.
  OutputParser(ToolSyntax syntax, const std::string& tools_json, bool in_reasoning = false);
  OutputDelta push(std::string_view text);
  // The end of output: whatever is held back, an unfinished call as text.
  OutputDelta finish();

 private:
  enum class State { Text, Reasoning, Call };
  void step(OutputDelta& out, bool at_end);
  void close_call(OutputDelta& out, std::string_view block);

  ToolSyntax syntax_;
  std::vector<std::pair<std::string, std::string>> param_types_;  // "tool\nparam" → JSON schema type
  State state_;
  std::string pending_;  // text not yet given out
};

}  // namespace moelsp::assist
