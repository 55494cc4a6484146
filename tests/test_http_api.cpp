// The HTTP API (server/http/api.h) without a socket, over a scripted
// backend: a test double of the model that answers every chat with a fixed
// output in a given tool-call syntax, streamed a few bytes at a time, so
// the shapes OpenAI clients read — tool_calls, finish_reason, streamed
// deltas, reasoning_content — are checked exactly.
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
  assist::Generation chat(const assist::ChatInput&, const std::function<void(const std::string&)>& on_text,
                          assist::Ticket&) override {
    for (size_t i = 0; i < output_.size(); i += 3)
      if (on_text) on_text(output_.substr(i, 3));
    assist::Generation g;
    g.text = output_;
    g.reason = FinishReason::Eos;
    g.timings.n_generated = 7;
    return g;
  }
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
  std::vector<std::string> data;
  bool send(const std::string& d) override {
    data.push_back(d);
    return true;
  }
};

struct World {
  assist::Service service;
  http::Api api{service, {}};
  World(assist::ToolSyntax syntax, const std::string& output) {
    service.set_backend(std::make_shared<ScriptedBackend>(syntax, output));
    http::ModelState m;
    m.phase = http::ModelState::Phase::Ready;
    m.id = "scripted";
    api.set_model(m);
  }
  http::HttpResponse post(const json& body, Events* events = nullptr) {
    http::HttpRequest r;
    r.method = "POST";
    r.target = "/v1/chat/completions";
    r.content_type = "application/json";
    r.body = body.dump();
    return api.handle(r, [&]() -> http::EventStream* { return events; });
  }
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

TEST_CASE("chat streamed: text and reasoning as deltas, the call as a tool_calls delta, then finish_reason") {
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
  REQUIRE(calls.size() == 1);
  CHECK(calls[0]["index"] == 0);
  CHECK(calls[0]["function"]["name"] == "read_file");
  CHECK(finish == "tool_calls");
}

TEST_CASE("chat: without tools, or with tool_choice none, the output is text; forcing a call is refused") {
  World w(assist::ToolSyntax::Qwen3Coder, kOutput);
  json j = json::parse(w.post(chat(false, nullptr)).body);
  CHECK(j["choices"][0]["finish_reason"] == "stop");
  CHECK(j["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>") != std::string::npos);
  json body = chat(false);
  body["tool_choice"] = "none";
  j = json::parse(w.post(body).body);
  CHECK(!j["choices"][0]["message"].contains("tool_calls"));
  body["tool_choice"] = "required";
  const http::HttpResponse r = w.post(body);
  CHECK(r.status == 400);
  CHECK(json::parse(r.body)["error"]["param"] == "tool_choice");
}
