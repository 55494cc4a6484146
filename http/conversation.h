// One conversation model under every protocol: OpenAI chat `messages`,
// Responses `input` items and Anthropic content blocks all become a
// Conversation, and a Conversation becomes the chat template's input — the
// OpenAI-shaped messages every model's Jinja template is written for
// (role, content, reasoning_content, tool_calls with arguments as an
// object, tool_call_id). So a protocol's file only translates its fields;
// what the template sees is decided here, once. Internal to http/.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "assist/service.h"
#include "assist/tool_calls.h"
#include "fields.h"

namespace moelsp::http {

struct CallTurn {
  std::string id, name;
  json arguments = json::object();  // an object (a string only when the client's did not parse)
};

struct Turn {
  std::string role;  // system, user, assistant, tool
  std::string content;
  std::string reasoning;        // an assistant's reasoning (thinking)
  std::vector<CallTurn> calls;  // an assistant's tool calls
  std::string call_id, name;    // a tool result: the call it answers, the tool's name
  json extra = json::object();  // further fields the client sent (OpenAI chat), passed to the template
};

// Turns as the protocols' readers make them.
inline Turn said(std::string role, std::string content) {
  Turn t;
  t.role = std::move(role);
  t.content = std::move(content);
  return t;
}
inline Turn tool_result(std::string content, std::string call_id, std::string name) {
  Turn t = said("tool", std::move(content));
  t.call_id = std::move(call_id);
  t.name = std::move(name);
  return t;
}
inline Turn assistant_call(CallTurn call) {
  Turn t = said("assistant", "");
  t.calls.push_back(std::move(call));
  return t;
}
inline Turn assistant_reasoning(std::string text) {
  Turn t = said("assistant", "");
  t.reasoning = std::move(text);
  return t;
}

enum class ToolChoice { Auto, None, Required, Named };

struct Conversation {
  std::vector<Turn> turns;
  // Function tools in OpenAI chat's shape: [{type: "function", function:
  // {name, description, parameters}}] — what templates are written for.
  json tools = json::array();
  ToolChoice choice = ToolChoice::Auto;
  std::string forced;  // ToolChoice::Named: the tool's name
  bool parallel_calls = true;
  std::optional<bool> thinking;         // enable_thinking, when the client said
  json template_vars = json::object();  // reasoning_effort and other template variables

  // Appends a turn. System text is gathered into one system turn at the
  // start (many templates refuse a system message anywhere else; agents
  // send instructions, developer messages and system blocks apart). An
  // assistant turn right after another assistant turn is the same turn
  // (Responses sends a message, its reasoning and each call as items).
  void add(Turn t);
  // The name of the tool a call id was made for (a tool result's `name`).
  std::string tool_name(const std::string& call_id) const;
};

// A call's arguments as templates iterate them: the JSON object a client's
// string spells (one that prints it with tojson gets the same JSON back);
// a string that is not an object stays a string, null is {}.
json call_arguments(const json& args);

// The chat template's input for `c`: messages_json, tools, thinking and
// template variables (limits, sampling and stops are the protocol's).
assist::ChatQuery to_query(const Conversation& c, const std::string& template_override);

// OpenAI chat's `messages`, `tools`, `tool_choice`, `parallel_tool_calls`,
// `chat_template_kwargs` and `reasoning_effort`.
Conversation openai_conversation(const json& body);

// tool_choice as OpenAI (chat and Responses) sends it: "auto", "none",
// "required", {"type": "function", "function": {"name"}} or (Responses)
// {"type": "function", "name"}.
void read_openai_tool_choice(const json& body, Conversation& c);

// What the tools mean for one generation with a model of `syntax`: whether
// its output is parsed for calls, and the call opening the answer is made
// to start with when the client forces a call (tool_choice required or
// named: the model then writes only the name or the arguments). A forced
// call with a model whose syntax is unknown is a 400.
struct ToolPlan {
  assist::ToolSyntax syntax = assist::ToolSyntax::None;  // None: calls are not parsed
  std::string prefix;                                    // ChatQuery::assistant_prefix
};
ToolPlan plan_tools(const Conversation& c, assist::ToolSyntax model_syntax);

// Text parts joined: a string, null, or [{type: T, text}] with T among
// `types`; other parts are refused naming `at` (a text-only model).
std::string parts_text(const json& content, const std::string& at, std::initializer_list<const char*> types,
                       const char* param);

}  // namespace moelsp::http
