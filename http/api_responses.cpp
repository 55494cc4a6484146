// POST /v1/responses: OpenAI's Responses API, the one Codex CLI speaks.
// Stateless: the client sends the whole conversation as `input` items
// (store: false); a `previous_response_id` is refused, since no response is
// kept. Streamed as the API's events, each with its sequence_number:
//   response.created, response.in_progress,
//   per output item: response.output_item.added, then
//     reasoning:  response.reasoning_text.delta/.done
//     message:    response.content_part.added, response.output_text.delta/.done, response.content_part.done
//     call:       response.function_call_arguments.delta/.done
//   response.output_item.done, and last response.completed (or
//   response.incomplete at max_output_tokens, response.failed) with usage.
#include <spdlog/spdlog.h>

#include "answer.h"
#include "api.h"
#include "constraint.h"
#include "conversation.h"

namespace moelsp::http {

namespace {

// One `input` item into the conversation.
void add_item(Conversation& c, const json& item, size_t i) {
  const std::string at = "input[" + std::to_string(i) + "]";
  if (!item.is_object()) throw BadField(at + " must be an object", "input");
  const std::string type = item.contains("type") && item["type"].is_string() ? item["type"] : "message";
  if (type == "message") {
    if (!item.contains("role") || !item["role"].is_string()) throw BadField(at + " needs a string 'role'", "input");
    c.add(said(item["role"], parts_text(item.contains("content") ? item["content"] : json(), at + ".content",
                                        {"input_text", "output_text", "text"}, "input")));
  } else if (type == "function_call") {
    c.add(assistant_call({string_field(item, "call_id"), string_field(item, "name"),
                          call_arguments(item.contains("arguments") ? item["arguments"] : json())}));
  } else if (type == "function_call_output") {
    const std::string id = string_field(item, "call_id");
    c.add(tool_result(parts_text(item.contains("output") ? item["output"] : json(), at + ".output",
                                 {"input_text", "output_text", "text"}, "input"),
                      id, c.tool_name(id)));
  } else if (type == "custom_tool_call" || type == "local_shell_call") {
    // Codex's freeform tools (apply_patch's patch text) and its local
    // shell: calls with their input as the arguments.
    const bool custom = type == "custom_tool_call";
    c.add(assistant_call({string_field(item, "call_id"), custom ? string_field(item, "name") : "local_shell",
                          custom ? json{{"input", string_field(item, "input")}}
                                 : (item.contains("action") ? item["action"] : json::object())}));
  } else if (type == "custom_tool_call_output" || type == "local_shell_call_output") {
    const std::string id = string_field(item, "call_id");
    c.add(tool_result(parts_text(item.contains("output") ? item["output"] : json(), at + ".output",
                                 {"input_text", "output_text", "text"}, "input"),
                      id, c.tool_name(id)));
  } else if (type == "web_search_call" || type == "compaction" || type == "image_generation_call") {
    spdlog::info("/v1/responses: an item of type '{}' (another server's) is left out", type);
  } else if (type == "reasoning") {
    // Its text where the client kept it; an encrypted_content alone is
    // another server's and says nothing to this model.
    std::string text =
        parts_text(item.contains("content") ? item["content"] : json(), at + ".content", {"reasoning_text"}, "input");
    if (text.empty())
      text =
          parts_text(item.contains("summary") ? item["summary"] : json(), at + ".summary", {"summary_text"}, "input");
    c.add(assistant_reasoning(text));
  } else {
    throw BadField(at + ": items of type '" + type +
                       "' are not supported (message, function_call, custom_tool_call, local_shell_call, their "
                       "outputs and reasoning are)",
                   "input");
  }
}

Conversation responses_conversation(const json& j) {
  Conversation c;
  if (has(j, "instructions")) c.add(said("system", string_field(j, "instructions")));
  if (!has(j, "input")) throw BadField("field 'input' is required", "input");
  const json& input = j["input"];
  if (input.is_string()) c.add(said("user", input));
  else if (input.is_array())
    for (size_t i = 0; i < input.size(); ++i) add_item(c, input[i], i);
  else throw BadField("field 'input' must be a string or an array of items", "input");
  if (c.turns.empty() || (c.turns.size() == 1 && c.turns[0].role == "system"))
    throw BadField("field 'input' holds no message", "input");
  if (has(j, "tools")) {
    if (!j["tools"].is_array()) throw BadField("field 'tools' must be an array", "tools");
    for (const auto& t : j["tools"]) {
      // Function tools become chat's shape; built-in ones (web_search,
      // custom, local_shell) are another server's tools: left out, logged.
      if (kind_of(t, "type") != "function" || kind_of(t, "name").empty()) {
        spdlog::info("/v1/responses: a tool of type '{}' is left out (only function tools are offered to the model)",
                     kind_of(t, "type"));
        continue;
      }
      json f = {{"name", t["name"]}, {"parameters", field_or(t, "parameters", json::object())}};
      if (t.contains("description")) f["description"] = t["description"];
      c.tools.push_back({{"type", "function"}, {"function", f}});
    }
  }
  read_openai_tool_choice(j, c);
  if (has(j, "reasoning")) {
    if (!j["reasoning"].is_object()) throw BadField("field 'reasoning' must be an object", "reasoning");
    if (has(j["reasoning"], "effort")) c.template_vars["reasoning_effort"] = string_field(j["reasoning"], "effort");
  }
  return c;
}

// What this server cannot do, refused by name instead of ignored.
void refuse_unsupported_responses(const json& j) {
  if (has(j, "previous_response_id"))
    throw BadField(
        "field 'previous_response_id': this server keeps no responses; send the whole conversation in 'input' "
        "(store: false)",
        "previous_response_id");
  if (has(j, "conversation"))
    throw BadField("field 'conversation': this server keeps no conversations; send them in 'input'", "conversation");
  if (bool_field(j, "background", false))
    throw BadField("field 'background': background responses are not supported", "background");
}

class ResponsesShape final : public AnswerShape {
 public:
  ResponsesShape(std::string id, std::string model, json echo)
      : id_(std::move(id)), model_(std::move(model)), echo_(std::move(echo)), created_(now_s()) {}

  Sses open() override {
    Sses out = event("response.created", {{"response", object("in_progress", json::array(), std::nullopt)}});
    append(out, event("response.in_progress", {{"response", object("in_progress", json::array(), std::nullopt)}}));
    return out;
  }
  Sses reasoning(const std::string& s) override {
    Sses out = switch_to(Item::Reasoning);
    text_ += s;
    append(out, event("response.reasoning_text.delta", place(0, {{"delta", s}})));
    return out;
  }
  Sses text(const std::string& s) override {
    Sses out = switch_to(Item::Message);
    text_ += s;
    append(out, event("response.output_text.delta", place(0, {{"delta", s}, {"logprobs", json::array()}})));
    return out;
  }
  Sses call_begin(int index, const std::string& name) override {
    Sses out = switch_to(Item::None);
    json item = call_item({index, name, ""});
    item["status"] = "in_progress";
    append(out, event("response.output_item.added", {{"output_index", output_.size()}, {"item", item}}));
    return out;
  }
  Sses call_args(int index, const std::string& piece) override {
    return event("response.function_call_arguments.delta", merged(call_at(index), {{"delta", piece}}));
  }
  Sses call_end(const CallOut& c) override {
    Sses out = event("response.function_call_arguments.done", merged(call_at(c.index), {{"arguments", c.arguments}}));
    return done(out, call_item(c));
  }
  Sses finish(const Answer& a) override {
    const bool cut = a.reason == FinishReason::Length || a.reason == FinishReason::Timeout;
    cut_ = cut;  // the message the limit interrupted closes as incomplete, as whole() says
    Sses out = switch_to(Item::None);
    append(out, event(cut ? "response.incomplete" : "response.completed",
                      {{"response", object(cut ? "incomplete" : "completed", output_, a.timings)}}));
    return out;
  }
  Sses failed(const HttpResponse& e) override {
    json r = object("failed", output_, std::nullopt);
    const json err = json::parse(e.body, nullptr, false);
    r["error"] = {{"code", err.is_object() ? err["error"].value("code", json("server_error")) : json("server_error")},
                  {"message", err.is_object() ? err["error"].value("message", "") : e.body}};
    return event("response.failed", {{"response", r}});
  }
  json whole(const Answer& a) override {
    json out = json::array();
    if (!a.reasoning.empty()) out.push_back(reasoning_item(id_ + "_rs", a.reasoning));
    const bool cut = a.reason == FinishReason::Length || a.reason == FinishReason::Timeout;
    if (!a.content.empty()) out.push_back(message_item(id_ + "_msg", a.content));
    if (cut && !a.content.empty()) out.back()["status"] = "incomplete";
    for (const auto& c : a.calls) out.push_back(call_item(c));
    return object(cut ? "incomplete" : "completed", out, a.timings);
  }

 private:
  enum class Item { None, Reasoning, Message };

  Sses event(const char* type, json data) {
    data["type"] = type;
    data["sequence_number"] = seq_++;
    return named_event(type, data);
  }
  static json merged(json a, const json& b) {
    a.update(b);
    return a;
  }
  // Where a delta goes: the open item, its content part.
  json place(int content_index, const json& fields) const {
    return merged({{"item_id", item_id_}, {"output_index", output_.size()}, {"content_index", content_index}}, fields);
  }
  static json reasoning_item(const std::string& id, const std::string& text) {
    return {{"id", id},
            {"type", "reasoning"},
            {"summary", json::array()},
            {"content", {{{"type", "reasoning_text"}, {"text", text}}}}};
  }
  static json message_item(const std::string& id, const std::string& text) {
    return {{"id", id},
            {"type", "message"},
            {"status", "completed"},
            {"role", "assistant"},
            {"content", {{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}}}}};
  }
  json call_at(int index) const {
    return {{"item_id", id_ + "_fc" + std::to_string(index)}, {"output_index", output_.size()}};
  }
  json call_item(const CallOut& c) const {
    const std::string n = std::to_string(c.index);
    return {{"id", id_ + "_fc" + n},
            {"type", "function_call"},
            {"status", "completed"},
            {"arguments", c.arguments},
            {"call_id", "call_" + id_.substr(5) + "_" + n},
            {"name", c.name}};
  }
  // Closes the open item (if any) and opens one of `kind`.
  Sses switch_to(Item kind) {
    if (kind != Item::None && kind == open_) return {};
    Sses out;
    if (open_ == Item::Reasoning) {
      append(out, event("response.reasoning_text.done", place(0, {{"text", text_}})));
      done(out, reasoning_item(item_id_, text_));
    } else if (open_ == Item::Message) {
      append(out, event("response.output_text.done", place(0, {{"text", text_}, {"logprobs", json::array()}})));
      const json part = {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}};
      append(out, event("response.content_part.done", place(0, {{"part", part}})));
      json item = message_item(item_id_, text_);
      if (cut_) item["status"] = "incomplete";
      done(out, item);
    }
    open_ = kind;
    text_.clear();
    if (kind == Item::None) return out;
    item_id_ = id_ + (kind == Item::Reasoning ? "_rs" : "_msg") + std::to_string(output_.size());
    json item = kind == Item::Reasoning ? reasoning_item(item_id_, "") : message_item(item_id_, "");
    if (kind == Item::Reasoning) item["content"] = json::array();
    else item["status"] = "in_progress", item["content"] = json::array();
    append(out, event("response.output_item.added", {{"output_index", output_.size()}, {"item", item}}));
    if (kind == Item::Message) {
      const json part = {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}};
      append(out, event("response.content_part.added", place(0, {{"part", part}})));
    }
    return out;
  }
  Sses& done(Sses& out, const json& item) {
    append(out, event("response.output_item.done", {{"output_index", output_.size()}, {"item", item}}));
    output_.push_back(item);
    return out;
  }
  json object(const char* status, const json& output, const std::optional<Timings>& t) const {
    json r = echo_;
    r.update(
        {{"id", id_},
         {"object", "response"},
         {"created_at", created_},
         {"status", status},
         {"model", model_},
         {"output", output},
         {"error", nullptr},
         {"incomplete_details", std::string(status) == "incomplete" ? json{{"reason", "max_output_tokens"}} : json()},
         {"usage", nullptr}});
    if (t)
      r["usage"] = {{"input_tokens", t->n_prompt},
                    {"input_tokens_details", {{"cached_tokens", t->n_prompt_cached}}},
                    {"output_tokens", t->n_generated},
                    {"output_tokens_details", {{"reasoning_tokens", 0}}},
                    {"total_tokens", t->n_prompt + t->n_generated}};
    return r;
  }

  std::string id_, model_;
  json echo_;  // the request's settings, as the API echoes them
  int64_t created_;
  int64_t seq_ = 0;
  json output_ = json::array();  // finished items
  Item open_ = Item::None;
  bool cut_ = false;  // the answer ended at the token or time limit
  std::string item_id_, text_;
};

// The request's settings a response repeats (clients read some back).
json echoed(const json& j, int max_tokens) {
  json e = {{"instructions", field_or(j, "instructions", json())},
            {"max_output_tokens", has(j, "max_output_tokens") ? json(max_tokens) : json()},
            {"parallel_tool_calls", field_or(j, "parallel_tool_calls", true)},
            {"tool_choice", field_or(j, "tool_choice", json("auto"))},
            {"tools", field_or(j, "tools", json::array())},
            {"temperature", field_or(j, "temperature", 1.0)},
            {"top_p", field_or(j, "top_p", 1.0)},
            {"store", false},
            {"text", {{"format", {{"type", "text"}}}}},
            {"reasoning", field_or(j, "reasoning", json::object())},
            {"metadata", field_or(j, "metadata", json::object())}};
  return e;
}

}  // namespace

HttpResponse Api::responses(const HttpRequest& req, const OpenStream& open_stream) {
  const json j = parse_body(req.body);
  const std::string model = served_as(string_field(j, "model"));
  refuse_unsupported_responses(j);
  const Conversation c = responses_conversation(j);
  assist::ChatQuery q = to_query(c, opt_.chat_template);
  // No limit asked: until the context is full (an agent's turn may be long).
  q.max_tokens = int(int_field(j, "max_output_tokens", 1 << 20, 1, 1 << 20));
  q.sampling = sampling(j, sampling_defaults(1.0f));
  q.constraint = responses_text_format(j, req.body);
  const bool stream = bool_field(j, "stream", false);
  ResponsesShape shape("resp_" + std::to_string(next_id_++), model, echoed(j, q.max_tokens));
  return run_chat({req, open_stream, c, std::move(q), stream, shape, "/v1/responses"});
}

}  // namespace moelsp::http
