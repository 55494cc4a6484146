// POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages
// API, the one Claude Code speaks (ANTHROPIC_BASE_URL). Content blocks map
// onto the conversation model: text, thinking (reasoning), tool_use (a
// call), tool_result (a tool turn; is_error said in its text). Fields the
// CLIs send that change nothing here (metadata, cache_control,
// context_management, ?beta=true) are accepted and ignored. Streamed as
//   message_start, ping,
//   per block: content_block_start, content_block_delta (text_delta,
//     thinking_delta, input_json_delta), content_block_stop,
//   message_delta (stop_reason, usage), message_stop;
// a failure once streaming is an `error` event. Errors are Anthropic's
// shape, {"type": "error", "error": {type, message}} (api.cpp).
#include <cstdio>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "answer.h"
#include "api.h"
#include "conversation.h"

namespace moelsp::http {

namespace {

// A tool_result's content: a string or text blocks.
std::string tool_result_text(const json& b, const std::string& at) {
  std::string text = parts_text(b.contains("content") ? b["content"] : json(), at + ".content", {"text"}, "messages");
  if (bool_field(b, "is_error", false) && !text.starts_with("Error")) text = "Error: " + text;
  return text;
}

// One user message: its tool results become tool turns (in order, as the
// calls they answer came), its text one user turn after them.
void add_user(Conversation& c, const json& content, const std::string& at) {
  if (!content.is_array()) return c.add(said("user", parts_text(content, at, {"text"}, "messages")));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    const std::string here = at + "[" + std::to_string(i) + "]";
    const std::string type = kind_of(b, "type");
    if (type == "text") text += parts_text(json::array({b}), here, {"text"}, "messages");
    else if (type == "tool_result") {
      const std::string id = string_field(b, "tool_use_id");
      c.add(tool_result(tool_result_text(b, here), id, c.tool_name(id)));
    } else {
      throw BadField(here + ": blocks of type '" + type + "' are not supported (this model reads text only)",
                     "messages");
    }
  }
  if (!text.empty()) c.add(said("user", text));
}

void add_assistant(Conversation& c, const json& content, const std::string& at) {
  if (!content.is_array()) return c.add(said("assistant", parts_text(content, at, {"text"}, "messages")));
  Turn t = said("assistant", "");
  for (const auto& b : content) {
    const std::string type = kind_of(b, "type");
    if (type == "text") t.content += string_field(b, "text");
    else if (type == "thinking") t.reasoning += string_field(b, "thinking");
    else if (type == "tool_use")
      t.calls.push_back({string_field(b, "id"), string_field(b, "name"), field_or(b, "input", json::object())});
    // redacted_thinking and server tools' blocks are another server's: nothing for this model
  }
  c.add(std::move(t));
}

void read_tools(const json& j, Conversation& c) {
  if (has(j, "tools")) {
    if (!j["tools"].is_array()) throw BadField("field 'tools' must be an array", "tools");
    for (const auto& t : j["tools"]) {
      if (!t.is_object() || !t.contains("name") || !t.contains("input_schema")) {
        spdlog::info("/v1/messages: the tool '{}' has no input_schema (a server tool): left out", kind_of(t, "name"));
        continue;
      }
      json f = {{"name", t["name"]}, {"parameters", t["input_schema"]}};
      if (t.contains("description")) f["description"] = t["description"];
      c.tools.push_back({{"type", "function"}, {"function", f}});
    }
  }
  if (!has(j, "tool_choice")) return;
  const json& tc = j["tool_choice"];
  const std::string type = kind_of(tc, "type");
  if (type == "auto") c.choice = ToolChoice::Auto;
  else if (type == "any") c.choice = ToolChoice::Required;
  else if (type == "none") c.choice = ToolChoice::None;
  else if (type == "tool") c.choice = ToolChoice::Named, c.forced = string_field(tc, "name");
  else
    throw BadField("field 'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}", "tool_choice");
  c.parallel_calls = !bool_field(tc, "disable_parallel_tool_use", false);
}

Conversation anthropic_conversation(const json& j) {
  Conversation c;
  if (has(j, "system")) c.add(said("system", parts_text(j["system"], "system", {"text"}, "system")));
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
    throw BadField("field 'messages' must be a non-empty array of {role, content}", "messages");
  for (size_t i = 0; i < j["messages"].size(); ++i) {
    const json& m = j["messages"][i];
    const std::string at = "messages[" + std::to_string(i) + "].content";
    const std::string role = kind_of(m, "role");
    const json content = m.is_object() && m.contains("content") ? m["content"] : json();
    if (role == "user") add_user(c, content, at);
    else if (role == "assistant") add_assistant(c, content, at);
    else if (role == "system")  // Claude Code's mid-conversation system messages: gathered into the system prompt
      c.add(said("system", parts_text(content, at, {"text"}, "messages")));
    else
      throw BadField(
          "messages[" + std::to_string(i) + "]: role '" + role + "' is not supported (user, assistant and system are)",
          "messages");
  }
  read_tools(j, c);
  // A budget is not enforced: the model reasons until it closes its
  // reasoning, within max_tokens.
  if (has(j, "thinking") && j["thinking"].is_object()) c.thinking = kind_of(j["thinking"], "type") != "disabled";
  return c;
}

class MessagesShape final : public AnswerShape {
 public:
  MessagesShape(std::string id, std::string model, std::vector<std::string> stops)
      : id_(std::move(id)), model_(std::move(model)), stops_(std::move(stops)) {}

  Sses open() override {
    json m = message(json::array(), nullptr, Timings{});
    Sses out = event("message_start", {{"message", m}});
    append(out, event("ping", json::object()));
    return out;
  }
  Sses reasoning(const std::string& s) override {
    Sses out = switch_to(Block::Thinking);
    append(out,
           event("content_block_delta", {{"index", index_}, {"delta", {{"type", "thinking_delta"}, {"thinking", s}}}}));
    return out;
  }
  Sses text(const std::string& s) override {
    Sses out = switch_to(Block::Text);
    append(out, event("content_block_delta", {{"index", index_}, {"delta", {{"type", "text_delta"}, {"text", s}}}}));
    return out;
  }
  Sses call_begin(int index, const std::string& name) override {
    Sses out = switch_to(Block::None);
    append(out, event("content_block_start", {{"index", ++index_}, {"content_block", tool_use({index, name, "{}"})}}));
    return out;
  }
  Sses call_args(int, const std::string& piece) override {
    return event("content_block_delta",
                 {{"index", index_}, {"delta", {{"type", "input_json_delta"}, {"partial_json", piece}}}});
  }
  Sses call_end(const CallOut&) override { return event("content_block_stop", {{"index", index_}}); }
  Sses finish(const Answer& a) override {
    Sses out = switch_to(Block::None);
    append(out, event("message_delta", {{"delta", {{"stop_reason", reason(a)}, {"stop_sequence", stop_sequence(a)}}},
                                        {"usage", usage(a.timings)}}));
    append(out, event("message_stop", json::object()));
    return out;
  }
  Sses failed(const HttpResponse& e) override {
    const json err = json::parse(e.body, nullptr, false);
    const std::string message = err.is_object() ? anthropic_wording(err["error"]) : e.body;
    return event(
        "error",
        {{"error", {{"type", e.status >= 500 ? "api_error" : "invalid_request_error"}, {"message", message}}}});
  }
  json whole(const Answer& a) override {
    json content = json::array();
    if (!a.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", a.reasoning}, {"signature", ""}});
    if (!a.content.empty()) content.push_back({{"type", "text"}, {"text", a.content}});
    for (const auto& c : a.calls) content.push_back(tool_use(c));
    json m = message(content, reason(a), a.timings);
    m["stop_sequence"] = stop_sequence(a);
    return m;
  }

 private:
  enum class Block { None, Thinking, Text };

  static Sses event(const char* type, json data) {
    data["type"] = type;
    return named_event(type, data);
  }
  static json usage(const Timings& t) {
    return {{"input_tokens", t.n_prompt - t.n_prompt_cached},
            {"cache_read_input_tokens", t.n_prompt_cached},
            {"cache_creation_input_tokens", 0},
            {"output_tokens", t.n_generated}};
  }
  json message(const json& content, const json& stop_reason, const Timings& t) const {
    return {{"id", id_},          {"type", "message"},          {"role", "assistant"},      {"model", model_},
            {"content", content}, {"stop_reason", stop_reason}, {"stop_sequence", nullptr}, {"usage", usage(t)}};
  }
  json tool_use(const CallOut& c) const {
    json input = json::parse(c.arguments, nullptr, false);
    return {{"type", "tool_use"},
            {"id", "toolu_" + id_.substr(4) + "_" + std::to_string(c.index)},
            {"name", c.name},
            {"input", input.is_object() ? input : json::object()}};
  }
  static const char* reason(const Answer& a) {
    if (!a.calls.empty()) return "tool_use";
    if (a.reason == FinishReason::Length || a.reason == FinishReason::Timeout) return "max_tokens";
    return a.reason == FinishReason::Stop ? "stop_sequence" : "end_turn";
  }
  // Which stop sequence ended the answer is known only when there was one.
  json stop_sequence(const Answer& a) const {
    return a.calls.empty() && a.reason == FinishReason::Stop && stops_.size() == 1 ? json(stops_[0]) : json();
  }
  // Closes the open block (if any) and opens one of `kind`.
  Sses switch_to(Block kind) {
    if (kind != Block::None && kind == open_) return {};
    Sses out;
    if (open_ != Block::None) append(out, event("content_block_stop", {{"index", index_}}));
    open_ = kind;
    if (kind == Block::Thinking)
      append(out, event("content_block_start",
                        {{"index", ++index_},
                         {"content_block", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}}}));
    else if (kind == Block::Text)
      append(out,
             event("content_block_start", {{"index", ++index_}, {"content_block", {{"type", "text"}, {"text", ""}}}}));
    return out;
  }

  std::string id_, model_;
  std::vector<std::string> stops_;
  Block open_ = Block::None;
  int index_ = -1;
};

}  // namespace

std::string anthropic_wording(const json& e) {
  std::string message = e.is_object() ? kind_of(e, "message") : "";
  long long n = 0, m = 0;
  if (kind_of(e, "code") == "context_length_exceeded" &&
      std::sscanf(message.c_str(), "prompt of %lld tokens does not fit the context of %lld", &n, &m) == 2)
    message = fmt::format("prompt is too long: {} tokens > {} maximum ({})", n, m, message);
  return message;
}

HttpResponse Api::messages(const HttpRequest& req, const OpenStream& open_stream) {
  const json j = parse_body(req.body);
  const std::string model = served_as(string_field(j, "model"));
  const Conversation c = anthropic_conversation(j);
  assist::ChatQuery q = to_query(c, opt_.chat_template);
  if (!has(j, "max_tokens")) throw BadField("field 'max_tokens' is required", "max_tokens");
  q.max_tokens = int(int_field(j, "max_tokens", 1024, 1, 1 << 20));
  q.sampling = sampling(j, sampling_defaults(1.0f));
  if (has(j, "stop_sequences")) {
    json s = json::object();
    s["stop"] = j["stop_sequences"];
    q.stop = stops(s);
  }
  const bool stream = bool_field(j, "stream", false);
  MessagesShape shape("msg_" + std::to_string(next_id_++), model, q.stop);
  return run_chat({req, open_stream, c, std::move(q), stream, shape, "/v1/messages"});
}

// POST /v1/messages/count_tokens: {"input_tokens": N}, the prompt the
// same request would generate from, counted by the model's tokenizer.
HttpResponse Api::count_tokens(const HttpRequest& req) {
  const json j = parse_body(req.body);
  served_as(string_field(j, "model"));
  const assist::ChatQuery q = to_query(anthropic_conversation(j), opt_.chat_template);
  try {
    const auto prompt = service_.chat_prompt(q);
    const auto n = prompt ? service_.count_tokens(*prompt) : std::nullopt;
    if (!n) return error(501, "the prompt is made and counted by the remote backend, not here", "server_error");
    return ok({{"input_tokens", *n}});
  } catch (const ChatTemplateError& e) {
    return error(400, e.what());
  }
}

}  // namespace moelsp::http
