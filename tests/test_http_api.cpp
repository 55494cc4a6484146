// The HTTP API (http/api.h) without a socket, over a scripted
// backend: a test double of the model that answers every chat with a fixed
// output in a given tool-call syntax, streamed a few bytes at a time, so
// the shapes clients read — OpenAI chat's tool_calls and deltas, the
// Responses API's items and events, Anthropic's content blocks and events —
// are checked exactly, and so is what each protocol's conversation becomes
// for the chat template (the backend keeps the last ChatInput).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "assist/backend.h"
#include "assist/service.h"
#include "http/api.h"

using namespace moelsp;
using json = nlohmann::json;

namespace {

class ScriptedBackend final : public assist::Backend {
 public:
  ScriptedBackend(assist::ToolSyntax syntax, std::string output) : syntax_(syntax), output_(std::move(output)) {}
  assist::Generation fim(const assist::FimInput&, assist::Ticket&) override { return {}; }
  // A forced call's opening (ChatInput::assistant_prefix) is the prompt's:
  // the model's output goes on after it.
  assist::Generation chat(const assist::ChatInput& in, const std::function<void(const std::string&)>& on_text,
                          assist::Ticket&) override {
    last = in;
    if (in.on_prompt) in.on_prompt(in.messages_json + prompt_end);
    if (!context_error.empty()) {
      assist::Generation g;
      g.reason = FinishReason::Error;
      g.error = context_error;
      g.error_kind = ErrorKind::ContextLength;
      return g;
    }
    const std::string out =
        output_.starts_with(in.assistant_prefix) ? output_.substr(in.assistant_prefix.size()) : output_;
    for (size_t i = 0; i < out.size(); i += 3)
      if (on_text) on_text(out.substr(i, 3));
    assist::Generation g;
    g.text = out;
    g.reason = reason;
    g.timings.n_prompt = 11;
    g.timings.n_generated = 7;
    return g;
  }
  std::optional<std::string> chat_prompt(const assist::ChatInput& in) override {
    return in.messages_json + in.assistant_prefix;
  }
  std::optional<int> count_tokens(const std::string& prompt) const override { return int(prompt.size()); }
  assist::ChatInput last;
  std::string context_error;  // set: every chat fails with it (ErrorKind::ContextLength)
  std::string prompt_end;     // what the rendered prompt ends with (a template's "<think>\n")
  FinishReason reason = FinishReason::Eos;
  assist::Generation text(const assist::TextInput&, const std::function<void(const std::string&)>&,
                          assist::Ticket&) override {
    return {};
  }
  assist::ToolSyntax tool_syntax(const std::string&) const override { return syntax_; }

 private:
  assist::ToolSyntax syntax_;
  std::string output_;
};

struct Events final : http::EventStream {
  std::vector<std::string> data, names;
  bool send_event(const std::string& name, const std::string& d) override {
    names.push_back(name);
    data.push_back(d);
    return true;
  }
};

struct World {
  assist::Service service;
  std::shared_ptr<ScriptedBackend> backend;
  http::Api api;
  World(assist::ToolSyntax syntax, const std::string& output, http::ApiOptions opt = {})
      : backend(std::make_shared<ScriptedBackend>(syntax, output)), api(service, std::move(opt)) {
    service.set_backend(backend);
    http::ModelState m;
    m.phase = http::ModelState::Phase::Ready;
    m.id = "scripted";
    api.set_model(m);
  }
  http::HttpResponse post(const json& body, Events* events = nullptr, const std::string& path = "/v1/chat/completions",
                          const std::string& x_api_key = "") {
    http::HttpRequest r;
    r.method = "POST";
    r.target = path;
    r.content_type = "application/json";
    r.x_api_key = x_api_key;
    r.body = body.dump();
    return api.handle(r, [&]() -> http::EventStream* { return events; });
  }
  // The conversation as the chat template got it.
  json template_messages() const { return json::parse(backend->last.messages_json); }
};

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "read_file",
  "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "line": {"type": "integer"}}}}}])");
const std::string kOutput =
    "<think>Need the file.</think>Reading it.\n<tool_call>\n<function=read_file>\n<parameter=path>\nnotes.txt\n"
    "</parameter>\n<parameter=line>\n1\n</parameter>\n</function>\n</tool_call>";

json chat(bool stream, const json& tools = kTools) {
  json body = {{"messages", {{{"role", "user"}, {"content", "first line of notes.txt?"}}}}, {"stream", stream}};
  if (!tools.is_null()) body["tools"] = tools;
  return body;
}

}  // namespace

TEST_CASE("chat: a tool call in the model's syntax is returned as tool_calls with finish_reason tool_calls") {
  World w(assist::ToolSyntax::Qwen3Coder, kOutput);
  const http::HttpResponse r = w.post(chat(false));
  REQUIRE(r.status == 200);
  const json j = json::parse(r.body);
  const json& choice = j["choices"][0];
  CHECK(choice["finish_reason"] == "tool_calls");
  CHECK(choice["message"]["content"] == "Reading it.\n");
  CHECK(choice["message"]["reasoning_content"] == "Need the file.");
  REQUIRE(choice["message"]["tool_calls"].size() == 1);
  const json& call = choice["message"]["tool_calls"][0];
  CHECK(call["type"] == "function");
  CHECK(call["function"]["name"] == "read_file");
  CHECK(json::parse(call["function"]["arguments"].get<std::string>()) == json{{"path", "notes.txt"}, {"line", 1}});
  CHECK(call["id"].get<std::string>().rfind("call_", 0) == 0);
}

TEST_CASE("chat streamed: text and reasoning as deltas, the call as tool_calls deltas, then finish_reason") {
  World w(assist::ToolSyntax::Qwen3Coder, kOutput);
  Events ev;
  REQUIRE(w.post(chat(true), &ev).status == 0);
  REQUIRE(ev.data.back() == "[DONE]");
  std::string content, reasoning;
  json calls = json::array();
  std::string finish;
  for (size_t i = 0; i + 1 < ev.data.size(); ++i) {
    const json c = json::parse(ev.data[i]);
    const json& d = c["choices"][0]["delta"];
    content += d.value("content", "");
    reasoning += d.value("reasoning_content", "");
    if (d.contains("tool_calls"))
      for (const auto& t : d["tool_calls"]) calls.push_back(t);
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
    CHECK(d.value("content", "").find("<tool_call>") == std::string::npos);  // never streamed as text
  }
  CHECK(content == "Reading it.\n");
  CHECK(reasoning == "Need the file.");
  // The first delta names the call; its arguments follow a parameter at a
  // time, joined by index as clients do.
  REQUIRE(calls.size() == 4);
  CHECK(calls[0]["index"] == 0);
  CHECK(calls[0]["function"]["name"] == "read_file");
  CHECK(calls[0]["id"].get<std::string>().rfind("call_", 0) == 0);
  std::string args;
  for (const auto& c : calls) {
    CHECK(c["index"] == 0);
    args += c["function"]["arguments"].get<std::string>();
  }
  CHECK(calls[1]["function"]["arguments"] == "{\"path\":\"notes.txt\"");
  CHECK(json::parse(args) == json{{"path", "notes.txt"}, {"line", 1}});
  CHECK(finish == "tool_calls");
}

TEST_CASE("chat: without tools, or with tool_choice none, the output is text") {
  World w(assist::ToolSyntax::Qwen3Coder, kOutput);
  json j = json::parse(w.post(chat(false, nullptr)).body);
  CHECK(j["choices"][0]["finish_reason"] == "stop");
  CHECK(j["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>") != std::string::npos);
  json body = chat(false);
  body["tool_choice"] = "none";
  j = json::parse(w.post(body).body);
  CHECK(!j["choices"][0]["message"].contains("tool_calls"));
}

const std::string kCallOnly =
    "<tool_call>\n<function=read_file>\n<parameter=path>\nnotes.txt\n</parameter>\n</function>\n</tool_call>";

TEST_CASE("chat: tool_choice required or named makes the answer open with a call, unknown names are refused") {
  World w(assist::ToolSyntax::Qwen3Coder, kCallOnly);
  json body = chat(false);
  body["tool_choice"] = "required";
  json j = json::parse(w.post(body).body);
  CHECK(w.backend->last.assistant_prefix == "<tool_call>\n<function=");
  CHECK(j["choices"][0]["finish_reason"] == "tool_calls");
  CHECK(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "read_file");
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "read_file"}}}};
  j = json::parse(w.post(body).body);
  CHECK(w.backend->last.assistant_prefix == "<tool_call>\n<function=read_file>\n");
  CHECK(json::parse(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>()) ==
        json{{"path", "notes.txt"}});
  // Streamed: the call named by the forced opening is the first delta, index 0.
  Events ev;
  body["stream"] = true;
  REQUIRE(w.post(body, &ev).status == 0);
  const json first = json::parse(ev.data[1])["choices"][0]["delta"]["tool_calls"][0];
  CHECK(first["index"] == 0);
  CHECK(first["function"]["name"] == "read_file");
  body["stream"] = false;
  body["parallel_tool_calls"] = false;  // the forced call is the one kept
  j = json::parse(w.post(body).body);
  CHECK(j["choices"][0]["message"]["tool_calls"].size() == 1);
  body.erase("parallel_tool_calls");
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "write_file"}}}};
  http::HttpResponse r = w.post(body);
  CHECK(r.status == 400);
  CHECK(json::parse(r.body)["error"]["param"] == "tool_choice");
  World plain(assist::ToolSyntax::None, "text");  // a template with no known call syntax
  body["tool_choice"] = "required";
  r = plain.post(body);
  CHECK(r.status == 400);
  CHECK(json::parse(r.body)["error"]["message"].get<std::string>().find("cannot be forced") != std::string::npos);
}

TEST_CASE("chat: parallel_tool_calls false keeps the first call only") {
  World w(assist::ToolSyntax::Qwen3Coder, kCallOnly + kCallOnly);
  json body = chat(false);
  CHECK(json::parse(w.post(body).body)["choices"][0]["message"]["tool_calls"].size() == 2);
  body["parallel_tool_calls"] = false;
  CHECK(json::parse(w.post(body).body)["choices"][0]["message"]["tool_calls"].size() == 1);
}

TEST_CASE("models: any name is answered and echoed unless names are listed") {
  World w(assist::ToolSyntax::None, "hi");
  json body = chat(false, nullptr);
  body["model"] = "claude-sonnet-4-5";
  http::HttpResponse r = w.post(body);
  REQUIRE(r.status == 200);
  CHECK(json::parse(r.body)["model"] == "claude-sonnet-4-5");
  http::ApiOptions opt;
  opt.served_names = {"coder"};
  World strict(assist::ToolSyntax::None, "hi", opt);
  CHECK(strict.post(body).status == 404);
  body["model"] = "coder";
  CHECK(strict.post(body).status == 200);
}

TEST_CASE("sampling: the model's recommended settings fill what a request leaves out, on every API") {
  World w(assist::ToolSyntax::None, "hi");
  CHECK(w.post(chat(false, nullptr)).status == 200);
  CHECK(w.backend->last.sampling.temperature == 1.0f);  // the OpenAI API's default
  CHECK(w.backend->last.sampling.top_k == 0);
  http::ModelState m;
  m.phase = http::ModelState::Phase::Ready;
  m.id = "scripted";
  m.sampling.temperature = 0.0f;
  m.sampling.top_k = 20;
  w.api.set_model(m);
  for (const char* path : {"/v1/chat/completions", "/v1/messages", "/v1/responses"}) {
    INFO(path);
    json body = chat(false, nullptr);
    if (std::string(path) == "/v1/messages") body["max_tokens"] = 16;
    if (std::string(path) == "/v1/responses") body = {{"input", "hello"}};
    REQUIRE(w.post(body, nullptr, path).status == 200);
    CHECK(w.backend->last.sampling.temperature == 0.0f);
    CHECK(w.backend->last.sampling.top_k == 20);
    CHECK(w.backend->last.sampling.top_p == 1.0f);  // not recommended: the API's default
  }
  json body = chat(false, nullptr);
  body["temperature"] = 0.7;
  body["top_k"] = 5;
  REQUIRE(w.post(body).status == 200);
  CHECK(w.backend->last.sampling.temperature == 0.7f);  // the request's own settings win
  CHECK(w.backend->last.sampling.top_k == 5);
}

namespace {
json responses_body(bool stream) {
  return {
      {"model", "gpt-5-codex"},
      {"instructions", "You are a coding agent."},
      {"input", {{{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "first line of notes.txt?"}}}}}}},
      {"tools",
       {{{"type", "function"}, {"name", "read_file"}, {"parameters", kTools[0]["function"]["parameters"]}},
        {{"type", "web_search"}}}},
      {"store", false},
      {"stream", stream}};
}
}  // namespace

TEST_CASE("responses: reasoning, message and function_call items, status and usage") {
  World w(assist::ToolSyntax::Qwen3Coder, kOutput);
  const http::HttpResponse r = w.post(responses_body(false), nullptr, "/v1/responses");
  REQUIRE(r.status == 200);
  const json j = json::parse(r.body);
  CHECK(j["object"] == "response");
  CHECK(j["status"] == "completed");
  CHECK(j["model"] == "gpt-5-codex");
  REQUIRE(j["output"].size() == 3);
  CHECK(j["output"][0]["type"] == "reasoning");
  CHECK(j["output"][0]["content"][0]["text"] == "Need the file.");
  CHECK(j["output"][1]["type"] == "message");
  CHECK(j["output"][1]["content"][0]["text"] == "Reading it.\n");
  const json& call = j["output"][2];
  CHECK(call["type"] == "function_call");
  CHECK(call["name"] == "read_file");
  CHECK(json::parse(call["arguments"].get<std::string>()) == json{{"path", "notes.txt"}, {"line", 1}});
  CHECK(!call["call_id"].get<std::string>().empty());
  CHECK(j["usage"]["input_tokens"] == 11);
  CHECK(j["usage"]["output_tokens"] == 7);
  // instructions became the system turn; the web_search tool was left out
  const json m = w.template_messages();
  CHECK(m[0]["role"] == "system");
  CHECK(m[0]["content"] == "You are a coding agent.");
  CHECK(json::parse(w.backend->last.template_options.tools_json).size() == 1);
}

TEST_CASE("responses streamed: the API's events in order, numbered, items opened and closed") {
  World w(assist::ToolSyntax::Qwen3Coder, kOutput);
  Events ev;
  REQUIRE(w.post(responses_body(true), &ev, "/v1/responses").status == 0);
  std::vector<std::string> types;
  std::string text, reasoning, args;
  for (size_t i = 0; i < ev.data.size(); ++i) {
    const json e = json::parse(ev.data[i]);
    CHECK(e["type"] == ev.names[i]);  // `event:` names the data's type
    CHECK(e["sequence_number"] == int(i));
    const std::string t = e["type"];
    if (types.empty() || types.back() != t) types.push_back(t);
    if (t == "response.output_text.delta") text += e["delta"].get<std::string>();
    if (t == "response.reasoning_text.delta") reasoning += e["delta"].get<std::string>();
    if (t == "response.function_call_arguments.done") args = e["arguments"];
  }
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  CHECK(types == want);
  CHECK(text == "Reading it.\n");
  CHECK(reasoning == "Need the file.");
  CHECK(json::parse(args) == json{{"path", "notes.txt"}, {"line", 1}});
  const json done = json::parse(ev.data.back());
  CHECK(done["response"]["output"].size() == 3);
  CHECK(done["response"]["usage"]["output_tokens"] == 7);
}

TEST_CASE("responses streamed: a message cut by max_output_tokens closes incomplete, then response.incomplete") {
  World w(assist::ToolSyntax::None, "a partial answer");
  w.backend->reason = FinishReason::Length;
  Events ev;
  json body = responses_body(true);
  body.erase("tools");
  REQUIRE(w.post(body, &ev, "/v1/responses").status == 0);
  REQUIRE(!ev.names.empty());
  CHECK(ev.names.back() == "response.incomplete");
  bool seen = false;
  for (size_t i = 0; i < ev.names.size(); ++i) {
    if (ev.names[i] != "response.output_item.done") continue;
    const json item = json::parse(ev.data[i])["item"];
    if (item["type"] != "message") continue;
    seen = true;
    CHECK(item["status"] == "incomplete");
  }
  CHECK(seen);
  const json done = json::parse(ev.data.back())["response"];
  CHECK(done["status"] == "incomplete");
  CHECK(done["output"].back()["status"] == "incomplete");
}

TEST_CASE("responses: input items become the template's conversation") {
  World w(assist::ToolSyntax::Qwen3Coder, "The first line is: hello");
  json body = responses_body(false);
  body["input"] = json::parse(R"([
    {"type": "message", "role": "developer", "content": "Use tools."},
    {"role": "user", "content": "first line of notes.txt?"},
    {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Need the file."}]},
    {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": "{\"path\": \"notes.txt\"}"},
    {"type": "function_call_output", "call_id": "c1", "output": "hello"}])");
  const http::HttpResponse r = w.post(body, nullptr, "/v1/responses");
  REQUIRE(r.status == 200);
  const json m = w.template_messages();
  REQUIRE(m.size() == 4);
  CHECK(m[0]["content"] ==
        "You are a coding agent.\n\nUse tools.");  // instructions and developer text, one system turn
  CHECK(m[1]["role"] == "user");
  CHECK(m[2]["role"] == "assistant");
  CHECK(m[2]["reasoning_content"] == "Need the file.");
  CHECK(m[2]["tool_calls"][0]["id"] == "c1");
  CHECK(m[2]["tool_calls"][0]["function"]["arguments"] == json{{"path", "notes.txt"}});  // an object for the template
  CHECK(m[3]["role"] == "tool");
  CHECK(m[3]["tool_call_id"] == "c1");
  CHECK(m[3]["name"] == "read_file");
  CHECK(m[3]["content"] == "hello");
  CHECK(json::parse(r.body)["output"][0]["content"][0]["text"] == "The first line is: hello");
  body["previous_response_id"] = "resp_1";
  CHECK(w.post(body, nullptr, "/v1/responses").status == 400);
  body.erase("previous_response_id");
  // Codex's freeform tool calls and items of other servers' tools.
  body["input"] = json::parse(R"([{"role": "user", "content": "patch it"},
    {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
    {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done"},
    {"type": "web_search_call", "id": "ws", "status": "completed"}])");
  REQUIRE(w.post(body, nullptr, "/v1/responses").status == 200);
  const json m2 = w.template_messages();
  CHECK(m2[2]["tool_calls"][0]["function"] ==
        json{{"name", "apply_patch"}, {"arguments", {{"input", "*** Begin Patch"}}}});
  CHECK(m2[3]["name"] == "apply_patch");
  CHECK(m2.size() == 4);
  body["input"] = json::parse(R"([{"type": "item_reference", "id": "x"}])");
  const http::HttpResponse bad = w.post(body, nullptr, "/v1/responses");
  CHECK(bad.status == 400);
  CHECK(json::parse(bad.body)["error"]["message"].get<std::string>().find("item_reference") != std::string::npos);
}

namespace {
json messages_body(bool stream) {
  return {
      {"model", "claude-sonnet-4-5"},
      {"max_tokens", 512},
      {"system", {{{"type", "text"}, {"text", "You are Claude Code."}, {"cache_control", {{"type", "ephemeral"}}}}}},
      {"messages", {{{"role", "user"}, {"content", "first line of notes.txt?"}}}},
      {"tools",
       {{{"name", "read_file"},
         {"description", "Read a file"},
         {"input_schema", kTools[0]["function"]["parameters"]}}}},
      {"metadata", {{"user_id", "u"}}},
      {"stream", stream}};
}
}  // namespace

TEST_CASE("messages: thinking, text and tool_use blocks, stop_reason tool_use") {
  World w(assist::ToolSyntax::Qwen3Coder, kOutput);
  const http::HttpResponse r = w.post(messages_body(false), nullptr, "/v1/messages?beta=true");
  REQUIRE(r.status == 200);
  const json j = json::parse(r.body);
  CHECK(j["type"] == "message");
  CHECK(j["model"] == "claude-sonnet-4-5");
  CHECK(j["stop_reason"] == "tool_use");
  REQUIRE(j["content"].size() == 3);
  CHECK(j["content"][0] == json{{"type", "thinking"}, {"thinking", "Need the file."}, {"signature", ""}});
  CHECK(j["content"][1] == json{{"type", "text"}, {"text", "Reading it.\n"}});
  CHECK(j["content"][2]["type"] == "tool_use");
  CHECK(j["content"][2]["name"] == "read_file");
  CHECK(j["content"][2]["input"] == json{{"path", "notes.txt"}, {"line", 1}});
  CHECK(j["usage"]["output_tokens"] == 7);
  CHECK(w.template_messages()[0] == json{{"role", "system"}, {"content", "You are Claude Code."}});
}

TEST_CASE("messages streamed: message_start, blocks with their deltas, message_delta, message_stop") {
  World w(assist::ToolSyntax::Qwen3Coder, kOutput);
  Events ev;
  REQUIRE(w.post(messages_body(true), &ev, "/v1/messages").status == 0);
  std::vector<std::string> types;
  std::string json_input;
  for (size_t i = 0; i < ev.data.size(); ++i) {
    const json e = json::parse(ev.data[i]);
    CHECK(e["type"] == ev.names[i]);
    const std::string t = e["type"] == "content_block_delta" ? "delta:" + e["delta"]["type"].get<std::string>()
                          : e["type"] == "content_block_start"
                              ? "start:" + e["content_block"]["type"].get<std::string>()
                              : e["type"].get<std::string>();
    if (types.empty() || types.back() != t) types.push_back(t);
    if (t == "delta:input_json_delta") json_input += e["delta"]["partial_json"].get<std::string>();
    if (t == "message_delta") {
      CHECK(e["delta"]["stop_reason"] == "tool_use");
      CHECK(e["usage"]["output_tokens"] == 7);
    }
  }
  const std::vector<std::string> want = {"message_start",      "ping",
                                         "start:thinking",     "delta:thinking_delta",
                                         "content_block_stop", "start:text",
                                         "delta:text_delta",   "content_block_stop",
                                         "start:tool_use",     "delta:input_json_delta",
                                         "content_block_stop", "message_delta",
                                         "message_stop"};
  CHECK(types == want);
  CHECK(json::parse(json_input) == json{{"path", "notes.txt"}, {"line", 1}});
}

TEST_CASE("messages: tool_use and tool_result blocks become the template's calls and tool turns") {
  World w(assist::ToolSyntax::Qwen3Coder, "It says hello.");
  json body = messages_body(false);
  body["messages"] = json::parse(R"([
    {"role": "user", "content": "first line of notes.txt?"},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "Need it.", "signature": "x"},
                                      {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "notes.txt"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "hello"}]},
                                 {"type": "text", "text": "and?"}]},
    {"role": "system", "content": "Be brief."}])");
  body["tool_choice"] = {{"type", "auto"}};
  body["thinking"] = {{"type", "enabled"}, {"budget_tokens", 1024}};
  const http::HttpResponse r = w.post(body, nullptr, "/v1/messages");
  REQUIRE(r.status == 200);
  CHECK(json::parse(r.body)["stop_reason"] == "end_turn");
  const json m = w.template_messages();
  REQUIRE(m.size() == 5);
  CHECK(m[0]["content"] ==
        "You are Claude Code.\n\nBe brief.");  // a system message in `messages` joins the system prompt
  CHECK(m[2]["tool_calls"][0]["function"] == json{{"name", "read_file"}, {"arguments", {{"path", "notes.txt"}}}});
  CHECK(m[2]["reasoning_content"] == "Need it.");
  CHECK(m[3] == json{{"role", "tool"}, {"content", "hello"}, {"tool_call_id", "toolu_1"}, {"name", "read_file"}});
  CHECK(m[4] == json{{"role", "user"}, {"content", "and?"}});
  CHECK(w.backend->last.template_options.enable_thinking == true);
  body["tool_choice"] = {{"type", "tool"}, {"name", "read_file"}};
  w.post(body, nullptr, "/v1/messages");
  CHECK(w.backend->last.assistant_prefix == "<tool_call>\n<function=read_file>\n");
}

TEST_CASE("messages: errors in Anthropic's shape, x-api-key, count_tokens") {
  http::ApiOptions opt;
  opt.api_key = "k";
  World w(assist::ToolSyntax::Qwen3Coder, kOutput, opt);
  json body = messages_body(false);
  http::HttpResponse r = w.post(body, nullptr, "/v1/messages", "wrong");
  CHECK(r.status == 401);
  CHECK(json::parse(r.body)["error"]["type"] == "authentication_error");
  CHECK(json::parse(r.body)["type"] == "error");
  CHECK(w.post(body, nullptr, "/v1/messages", "k").status == 200);
  body.erase("max_tokens");
  r = w.post(body, nullptr, "/v1/messages", "k");
  CHECK(r.status == 400);
  CHECK(json::parse(r.body)["error"]["type"] == "invalid_request_error");
  body["messages"] = json::parse(R"([{"role": "user", "content": [{"type": "image", "source": {}}]}])");
  r = w.post(body, nullptr, "/v1/messages/count_tokens", "k");
  CHECK(r.status == 400);
  CHECK(json::parse(r.body)["error"]["message"].get<std::string>().find("image") != std::string::npos);
  body["messages"] = json::parse(R"([{"role": "user", "content": "hi"}])");
  r = w.post(body, nullptr, "/v1/messages/count_tokens", "k");
  REQUIRE(r.status == 200);
  // The scripted backend counts a prompt's bytes; its prompt is the messages' JSON.
  const json prompt = {{{"role", "system"}, {"content", "You are Claude Code."}},
                       {{"role", "user"}, {"content", "hi"}}};
  CHECK(json::parse(r.body)["input_tokens"] == prompt.dump().size());
}

TEST_CASE("chat with gpt-oss: the channels as reasoning, answer and calls, streamed and not") {
  const std::string harmony =
      "<|channel|>analysis<|message|>Need the file.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.read_file <|constrain|>json<|message|>{\"path\": \"notes.txt\", \"line\": 1}<|call|>";
  World w(assist::ToolSyntax::Harmony, harmony);
  json j = json::parse(w.post(chat(false)).body);
  CHECK(j["choices"][0]["finish_reason"] == "tool_calls");
  CHECK(j["choices"][0]["message"]["reasoning_content"] == "Need the file.");
  CHECK(j["choices"][0]["message"]["content"].is_null());
  CHECK(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "read_file");
  Events ev;
  REQUIRE(w.post(chat(true), &ev).status == 0);
  std::string reasoning;
  for (size_t i = 0; i + 1 < ev.data.size(); ++i)
    reasoning += json::parse(ev.data[i])["choices"][0]["delta"].value("reasoning_content", "");
  CHECK(reasoning == "Need the file.");  // streamed, not only in the whole answer
  World plain(assist::ToolSyntax::Harmony, "<|channel|>final<|message|>Hello.<|return|>");
  j = json::parse(plain.post(chat(false, nullptr)).body);  // no tools: the channels are still parsed
  CHECK(j["choices"][0]["message"]["content"] == "Hello.");
}

TEST_CASE(
    "an over-long prompt: OpenAI's context_length_exceeded, Anthropic's 'prompt is too long' (Claude Code compacts)") {
  World w(assist::ToolSyntax::Qwen3Coder, kOutput);
  w.backend->context_error =
      "prompt of 52768 tokens does not fit the context of 40960 (with room for 1024 new tokens): use a model with a "
      "longer context";
  http::HttpResponse r = w.post(chat(false));
  CHECK(r.status == 400);
  CHECK(json::parse(r.body)["error"]["code"] == "context_length_exceeded");
  r = w.post(messages_body(false), nullptr, "/v1/messages");
  CHECK(r.status == 400);
  const std::string message = json::parse(r.body)["error"]["message"];
  CHECK(message.rfind("prompt is too long: 52768 tokens > 40960 maximum (prompt of 52768", 0) == 0);
  r = w.post(responses_body(false), nullptr, "/v1/responses");
  CHECK(json::parse(r.body)["error"]["code"] == "context_length_exceeded");
}

TEST_CASE("chat: a template that opens the reasoning makes the answer start as reasoning") {
  World w(assist::ToolSyntax::Hermes, "The user greets.</think>Hello!");
  w.backend->prompt_end = "<|im_start|>assistant\n<think>\n";
  json j = json::parse(w.post(chat(false, nullptr)).body);
  CHECK(j["choices"][0]["message"]["reasoning_content"] == "The user greets.");
  CHECK(j["choices"][0]["message"]["content"] == "Hello!");
  w.backend->prompt_end = "<|im_start|>assistant\n";  // not opened: the same output is text (a stray </think> kept)
  j = json::parse(w.post(chat(false, nullptr)).body);
  CHECK(j["choices"][0]["message"]["content"] == "The user greets.</think>Hello!");
}
