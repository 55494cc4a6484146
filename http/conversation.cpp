// The conversation model (conversation.h): turns in, the template's
// OpenAI-shaped messages out; and OpenAI chat's messages read into it.
#include "conversation.h"

#include <spdlog/spdlog.h>

#include "util/json_limits.h"

namespace moelsp::http {

namespace {
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
}  // namespace

json call_arguments(const json& args) {
  if (!args.is_string()) return args.is_null() ? json::object() : args;
  const std::string& s = args.get_ref<const std::string&>();
  if (!json_limit_problem(s).empty()) return args;
  json parsed = json::parse(s, nullptr, false);
  return parsed.is_object() ? parsed : args;
}

std::string parts_text(const json& content, const std::string& at, std::initializer_list<const char*> types,
                       const char* param) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    throw BadField(at + " must be a string, null or an array of text parts, not " + content.type_name(), param);
  std::string text;
  for (const auto& part : content) {
    std::string type;
    if (part.is_object() && part.contains("type") && part["type"].is_string()) type = part["type"];
    const bool known = std::any_of(types.begin(), types.end(), [&](const char* t) { return type == t; });
    if (known && part.contains("text") && part["text"].is_string()) text += part["text"].get<std::string>();
    else if (known) throw BadField(at + ": a " + type + " part needs a string 'text'", param);
    else throw BadField(at + ": parts of type '" + type + "' are not supported (this model reads text only)", param);
  }
  return text;
}

void Conversation::add(Turn t) {
  if (t.role == "system" || t.role == "developer") {
    if (t.content.empty()) return;
    if (turns.empty() || turns.front().role != "system") turns.insert(turns.begin(), said("system", ""));
    std::string& system = turns.front().content;
    system += (system.empty() ? "" : "\n\n") + t.content;
    return;
  }
  if (t.role == "assistant" && !turns.empty() && turns.back().role == "assistant" && t.extra.empty()) {
    Turn& last = turns.back();
    // Reasoning comes before what it led to; text after text is one answer.
    last.reasoning += t.reasoning;
    if (!t.content.empty()) last.content += (last.content.empty() || !last.calls.empty() ? "" : "\n") + t.content;
    last.calls.insert(last.calls.end(), t.calls.begin(), t.calls.end());
    return;
  }
  turns.push_back(std::move(t));
}

std::string Conversation::tool_name(const std::string& call_id) const {
  for (const auto& t : turns)
    for (const auto& c : t.calls)
      if (c.id == call_id) return c.name;
  return "";
}

assist::ChatQuery to_query(const Conversation& c, const std::string& template_override) {
  assist::ChatQuery q;
  q.as_given = true;
  json messages = json::array();
  for (const Turn& t : c.turns) {
    json m = t.extra;
    m["role"] = t.role;
    m["content"] = t.content;  // never null: most templates concatenate it
    if (!t.reasoning.empty()) m["reasoning_content"] = t.reasoning;
    if (!t.calls.empty()) {
      json calls = json::array();
      for (const auto& call : t.calls)
        calls.push_back({{"id", call.id},
                         {"type", "function"},
                         {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      m["tool_calls"] = calls;
    }
    if (t.role == "tool") {
      if (!t.call_id.empty()) m["tool_call_id"] = t.call_id;
      if (!t.name.empty()) m["name"] = t.name;
    }
    q.messages.push_back({t.role, t.content});
    messages.push_back(std::move(m));
  }
  q.messages_json = dump(messages);
  // Tools the client forbade (tool_choice none) are still shown: the
  // conversation may hold calls of them; their calls are just not parsed.
  if (!c.tools.empty()) {
    // Templates print a tool's description as a string (gpt-oss's and
    // others fail on a missing one): absent is empty.
    json tools = c.tools;
    for (auto& t : tools)
      if (t.is_object() && t.contains("function") && t["function"].is_object() &&
          !t["function"].contains("description"))
        t["function"]["description"] = "";
    q.template_options.tools_json = dump(tools);
  }
  q.template_options.enable_thinking = c.thinking;
  if (!c.template_vars.empty()) q.template_options.extra_json = dump(c.template_vars);
  q.template_override = template_override;
  return q;
}

void read_openai_tool_choice(const json& j, Conversation& c) {
  c.parallel_calls = bool_field(j, "parallel_tool_calls", true);
  if (!has(j, "tool_choice")) return;
  const json& t = j["tool_choice"];
  if (t == "auto") c.choice = ToolChoice::Auto;
  else if (t == "none") c.choice = ToolChoice::None;
  else if (t == "required") c.choice = ToolChoice::Required;
  else if (kind_of(t, "type") == "function") {
    const json& f = t.contains("function") ? t["function"] : t;  // chat nests it, Responses does not
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string())
      throw BadField("field 'tool_choice': a function choice needs the function's name", "tool_choice");
    c.choice = ToolChoice::Named;
    c.forced = f["name"];
  } else {
    throw BadField("field 'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", ...}",
                   "tool_choice");
  }
}

namespace {
// One OpenAI chat message: every field the client sent is kept for the
// template; the content's text parts are joined.
Turn openai_turn(const json& m, size_t i) {
  const std::string at = "messages[" + std::to_string(i) + "]";
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
    throw BadField(at + " needs a string 'role'", "messages");
  Turn t;
  t.role = m["role"];
  t.content = parts_text(m.contains("content") ? m["content"] : json(), at + ".content", {"text"}, "messages");
  for (const auto& [k, v] : m.items()) {
    if (k == "role" || k == "content") continue;
    if (k == "reasoning_content" && v.is_string()) t.reasoning = v;
    else if (k == "tool_call_id" && v.is_string()) t.call_id = v;
    else if (k == "name" && v.is_string() && t.role == "tool") t.name = v;
    else if (k == "tool_calls" && v.is_array()) {
      for (const auto& call : v) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        const json& f = call["function"];
        t.calls.push_back({string_field(call, "id"), string_field(f, "name"),
                           call_arguments(f.contains("arguments") ? f["arguments"] : json())});
      }
    } else {
      t.extra[k] = v;
    }
  }
  return t;
}
}  // namespace

Conversation openai_conversation(const json& j) {
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
    throw BadField("field 'messages' must be a non-empty array of {role, content}", "messages");
  Conversation c;
  // As sent: OpenAI chat clients order their own system messages.
  for (size_t i = 0; i < j["messages"].size(); ++i) c.turns.push_back(openai_turn(j["messages"][i], i));
  if (has(j, "tools")) {
    if (!j["tools"].is_array()) throw BadField("field 'tools' must be an array of tool schemas", "tools");
    c.tools = j["tools"];
  }
  read_openai_tool_choice(j, c);
  if (has(j, "chat_template_kwargs")) {
    if (!j["chat_template_kwargs"].is_object())
      throw BadField("field 'chat_template_kwargs' must be an object", "chat_template_kwargs");
    for (const auto& [k, v] : j["chat_template_kwargs"].items()) {
      if (k != "enable_thinking") c.template_vars[k] = v;
      else if (v.is_boolean()) c.thinking = v.get<bool>();
      else throw BadField("chat_template_kwargs.enable_thinking must be true or false", "chat_template_kwargs");
    }
  }
  if (has(j, "reasoning_effort") && !c.template_vars.contains("reasoning_effort"))
    c.template_vars["reasoning_effort"] = string_field(j, "reasoning_effort");
  return c;
}

ToolPlan plan_tools(const Conversation& c, assist::ToolSyntax model_syntax) {
  ToolPlan p;
  // gpt-oss's channels are parsed here whether or not tools were given.
  if (model_syntax == assist::ToolSyntax::Harmony) p.syntax = model_syntax;
  if (c.tools.empty() || c.choice == ToolChoice::None) return p;
  if (c.choice == ToolChoice::Named) {
    const bool known = std::any_of(c.tools.begin(), c.tools.end(), [&](const json& t) {
      const json& f = t.contains("function") ? t["function"] : t;
      return kind_of(f, "name") == c.forced;
    });
    if (!known)
      throw BadField("field 'tool_choice' names '" + c.forced + "', which is not among the tools", "tool_choice");
  }
  if (c.choice != ToolChoice::Auto && model_syntax == assist::ToolSyntax::None)
    throw BadField(
        "field 'tool_choice': this model's chat template shows no tool-call syntax moelsp knows, so a call "
        "cannot be forced (use \"auto\")",
        "tool_choice");
  p.syntax = model_syntax;
  if (c.choice != ToolChoice::Auto) p.prefix = assist::call_opening(model_syntax, c.forced);
  return p;
}

}  // namespace moelsp::http
