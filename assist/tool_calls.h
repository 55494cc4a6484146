// Tool calls and reasoning parsed from a model's own output, per family of
// chat template (the family is read off the template, as llama.cpp does):
//
//   hermes       <tool_call>{"name": N, "arguments": {...}}</tool_call>         Qwen2.5, Qwen3
//   qwen3-coder  <tool_call><function=N><parameter=K>V</parameter>…</function></tool_call>
//   glm          <tool_call>N<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>   GLM-4.5…5
//   deepseek     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>…
//                (V3.1; V3/R1 write function<｜tool▁sep｜>N\n```json\n{...}\n```)
//   harmony      <|channel|>commentary to=functions.N <|constrain|>json<|message|>{...}<|call|>   gpt-oss
//                (analysis is reasoning, final the answer)
//   mistral      [TOOL_CALLS]N[ARGS]{...}  (Devstral, Mistral Small 3.2) or [TOOL_CALLS][{"name", "arguments"}]
//   llama3       {"name": N, "parameters": {...}} as the whole answer, or after <|python_tag|>
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

enum class ToolSyntax { None, Hermes, Qwen3Coder, Glm, DeepSeek, Harmony, Mistral, Llama3 };
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

// A piece of output, in the order the model wrote it: text to show,
// reasoning, or a piece of a call as it streams — its start (the tool's
// name), pieces of its arguments' JSON text, its end; joined, a call's Args
// pieces are its `arguments`. The XML families' arguments come a parameter
// at a time (a call whose name has arrived is a call: cut off, it ends with
// the parameters it has, and a warning); the JSON families' at once.
struct OutputPiece {
  enum class Kind { Text, Reasoning, Begin, Args, End } kind;
  std::string text;  // Text, Reasoning: the text; Begin: the tool's name; Args: a piece of the arguments
  bool operator==(const OutputPiece&) const = default;
};

// What a piece of output adds: the pieces in order, and the text, reasoning
// and finished calls they make.
struct OutputDelta {
  std::string content, reasoning;
  std::vector<OutputPiece> pieces;
  std::vector<ToolCall> calls;
  void add_text(std::string_view s);
  void add_reasoning(std::string_view s);
  void add(OutputPiece p) { pieces.push_back(std::move(p)); }
  void append(const OutputDelta& more);
  bool empty() const { return pieces.empty() && calls.empty(); }
};

class OutputParser {
 public:
  // `tools_json`: the request's tools (OpenAI's [{type, function: {name,
  // parameters}}] or bare {name, parameters}), for typing values; may be "".
  // `in_reasoning`: the prompt already opened <think> (a template that
  // ends the generation prompt with it), so output starts as reasoning.
  OutputParser(ToolSyntax syntax, const std::string& tools_json, bool in_reasoning = false);
  OutputDelta push(std::string_view text);
  // The prompt turned out to end inside the model's reasoning (a template
  // that ends its generation prompt with <think>): output starts as
  // reasoning. Only before any output has been pushed.
  void start_in_reasoning();
  // The end of output: whatever is held back, an unfinished call as text.
  OutputDelta finish();

 private:
  enum class State { Text, Reasoning, Call, Header, Body };
  enum class Channel { Final, Analysis, Call };  // harmony: what the open message's body is
  void step(OutputDelta& out, bool at_end);
  bool step_text(OutputDelta& out, bool at_end);
  bool step_call(OutputDelta& out, bool at_end);
  bool step_harmony(OutputDelta& out, bool at_end);
  // Parses a call block (between the call's opening and its end); false
  // when it is not a call (then it is returned as text).
  bool close_call(OutputDelta& out, std::string_view block);
  // The XML families: the call's pieces so far from its block; `final`
  // when the block is all there will be. False while it has no name.
  bool stream_xml(OutputDelta& out, std::string_view block, bool final);
  std::string typed(const std::string& tool, const std::string& key, std::string_view value) const;

  ToolSyntax syntax_;
  std::vector<std::pair<std::string, std::string>> param_types_;  // "tool\nparam" → JSON schema type
  std::vector<std::string> tool_names_;
  State state_;
  std::string pending_;   // text not yet given out
  bool at_start_ = true;  // llama3: nothing but whitespace shown yet (a JSON object here is a call)
  Channel channel_ = Channel::Final;
  std::string call_name_;   // harmony: the open message's recipient
  std::string opener_;      // the text that opened the call (returned with it when it does not parse)
  bool call_open_ = false;  // XML families: the open call's Begin was given
  size_t args_sent_ = 0;    // and this many of its parameters
  std::string args_text_;   // their JSON, as given
};

}  // namespace moelsp::assist
