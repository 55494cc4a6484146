// Protocol transcripts against the real server over pipes: framing edge
// cases, every error code, lifecycle and exit codes, documents with UTF-16
// positions, completions on a reference model, cancellation.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <set>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "lsp/documents.h"
#include "lsp/server.h"
#include "lsp/server_impl.h"
#include "lsp/transport.h"
#include "lsp_client.h"
#include "test_data.h"

using namespace moelsp::lsp;
using namespace moelsp::assist;
using json = nlohmann::json;

using namespace moelsp::test;

TEST_CASE("lifecycle: errors before initialize, after shutdown, exit codes") {
  {
    Client c;
    c.request(5, "textDocument/completion", {});
    CHECK(c.response()["error"]["code"] == -32002);
    c.notify("textDocument/didOpen", {});  // ignored, no answer
    c.initialize();
    c.request(2, "no/such/method");
    CHECK(c.response()["error"]["code"] == -32601);
    c.notify("$/someClientNotification", {{"x", 1}});  // ignored silently
    c.request(3, "initialize", {});
    CHECK(c.response()["error"]["code"] == -32600);
    c.request(4, "shutdown");
    const json r = c.response();
    CHECK(r["id"] == 4);
    CHECK(r["result"].is_null());
    c.request(6, "moelsp/status");
    CHECK(c.response()["error"]["code"] == -32600);
    c.notify("exit");
    CHECK(c.exit_code() == 0);
  }
  {
    Client c;
    c.initialize();
    c.notify("exit");  // without shutdown
    CHECK(c.exit_code() == 1);
  }
  {
    Client c;
    c.initialize();
    CHECK(c.exit_code() == 1);  // end of input without exit
  }
}

TEST_CASE("framing and JSON errors: the server keeps reading") {
  Client c;
  c.initialize();
  // not JSON
  c.raw("Content-Length: 9\r\n\r\n{not json");
  json r = c.response();
  CHECK(r["error"]["code"] == -32700);
  CHECK(r["id"].is_null());
  // JSON but not a request object
  c.raw("Content-Length: 2\r\n\r\n[]");
  CHECK(c.response()["error"]["code"] == -32600);
  c.send({{"jsonrpc", "2.0"}, {"id", 9}, {"method", 42}});
  CHECK(c.response()["error"]["code"] == -32600);
  // Content-Type tolerated
  const std::string body = json{{"jsonrpc", "2.0"}, {"id", 10}, {"method", "moelsp/status"}}.dump();
  c.raw("Content-Length: " + std::to_string(body.size()) +
        "\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" + body);
  CHECK(c.response()["id"] == 10);
  // 1 MB of garbage, a missing length, an absurd length: skipped, next request answered
  std::string garbage(1 << 20, 'x');
  for (size_t i = 0; i < garbage.size(); i += 997) garbage[i] = '\n';
  c.raw(garbage);
  c.raw("\r\nX-Nothing: 1\r\n\r\n");
  c.raw("Content-Length: 99999999999\r\n\r\n");
  c.request(11, "moelsp/status");
  r = c.response();
  CHECK(r["id"] == 11);
  CHECK(r["result"].contains("state"));
}

TEST_CASE("a message nested 300,000 deep is a parse error naming the limit, and the server keeps serving") {
  Client c;
  c.initialize();
  const std::string deep =
      "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"moelsp/status\",\"params\":" + std::string(300000, '[') +
      std::string(300000, ']') + "}";
  c.raw("Content-Length: " + std::to_string(deep.size()) + "\r\n\r\n" + deep);
  const json r = c.response();
  CHECK(r["error"]["code"] == -32700);
  CHECK(r["error"]["message"].get<std::string>().find("deeper than 128 levels") != std::string::npos);
  c.request(6, "moelsp/status");
  CHECK(c.response()["id"] == 6);
}

TEST_CASE("UTF-16 positions, CRLF and incremental edits") {
  const std::string text =
      "a\xf0\x9f\xa6\x99"
      "b\r\n\xc3\xa9x\ny";  // a🦙b CRLF éx LF y
  CHECK(offset_of(text, {0, 0}) == 0);
  CHECK(offset_of(text, {0, 1}) == 1);
  CHECK(offset_of(text, {0, 3}) == 5);   // 🦙 is two UTF-16 units
  CHECK(offset_of(text, {0, 4}) == 6);   // end of line 0
  CHECK(offset_of(text, {0, 99}) == 6);  // clamps to the line end
  CHECK(offset_of(text, {1, 0}) == 8);
  CHECK(offset_of(text, {1, 1}) == 10);  // é is one unit, two bytes
  CHECK(offset_of(text, {2, 1}) == 13);
  CHECK(offset_of(text, {9, 0}) == text.size());
  CHECK(position_of(text, 5).character == 3);
  CHECK(position_of(text, 10).line == 1);
  CHECK(position_of(text, 10).character == 1);
  DocumentStore d;
  d.open("file:///x.py", "python", 1, text);
  REQUIRE(d.change("file:///x.py", 2, Range{{0, 1}, {0, 3}}, "--"));  // replace 🦙
  CHECK(*d.get("file:///x.py")->text == "a--b\r\n\xc3\xa9x\ny");
  REQUIRE(d.change("file:///x.py", 3, Range{{1, 1}, {2, 0}}, ""));  // join lines 1 and 2
  CHECK(*d.get("file:///x.py")->text == "a--b\r\n\xc3\xa9y");
  REQUIRE(d.change("file:///x.py", 4, std::nullopt, "new"));
  CHECK(*d.get("file:///x.py")->text == "new");
  CHECK(!d.change("file:///other.py", 1, std::nullopt, ""));
}

TEST_CASE("a document snapshot is shared, not copied, and later edits leave it unchanged") {
  DocumentStore d;
  d.open("file:///s.py", "python", 1, "abc\n");
  const std::string* first = d.get("file:///s.py")->text.get();
  // No snapshot held: an edit changes the text in place (no copy of a large file per keystroke).
  REQUIRE(d.change("file:///s.py", 2, Range{{0, 3}, {0, 3}}, "d"));
  CHECK(d.get("file:///s.py")->text.get() == first);
  // A snapshot held (a completion reading it): the edit goes to a copy.
  const auto held = d.get("file:///s.py");
  CHECK(held->text.get() == first);
  REQUIRE(d.change("file:///s.py", 3, Range{{0, 0}, {0, 0}}, ">"));
  CHECK(*held->text == "abcd\n");
  CHECK(*d.get("file:///s.py")->text == ">abcd\n");
  CHECK(held->version == 2);
}

TEST_CASE("inline and classic completions on a reference model, capabilities follow the client") {
  Client c;
  c.initialize(model_options());
  wait_ready(c);
  const std::string uri = "file:///t/a.py";
  c.notify("textDocument/didOpen",
           {{"textDocument",
             {{"uri", uri}, {"languageId", "python"}, {"version", 1}, {"text", "def area(w, h):\n    return "}}}});
  c.request(20, "textDocument/inlineCompletion",
            {{"textDocument", {{"uri", uri}}},
             {"position", {{"line", 1}, {"character", 11}}},
             {"context", {{"triggerKind", 2}}}});
  json r = c.response();
  REQUIRE(r.contains("result"));
  REQUIRE(r["result"]["items"].is_array());
  for (const auto& it : r["result"]["items"]) {
    CHECK(!it["insertText"].get<std::string>().empty());
    CHECK(it["range"]["start"]["line"] == 1);
  }
  c.request(21, "textDocument/completion",
            {{"textDocument", {{"uri", uri}}}, {"position", {{"line", 1}, {"character", 11}}}});
  r = c.response();
  REQUIRE(r["result"]["items"].is_array());
  c.request(22, "moelsp/status");
  r = c.response();
  CHECK(r["result"]["state"] == "ready");
  CHECK(r["result"]["plan"]["threads"] == 2);
  // The paged KV cache and the scheduler report themselves.
  CHECK(r["result"]["plan"]["kvCache"]["type"] == "f16");
  CHECK(r["result"]["plan"]["kvCache"]["blockSize"] == 16);
  const json& kv = r["result"]["kvCache"];
  CHECK(kv["blocksTotal"].get<int>() ==
        kv["blocksInUse"].get<int>() + kv["blocksCached"].get<int>() + kv["blocksFree"].get<int>());
  CHECK(kv["blocksInUse"] == 0);  // nothing runs now
  CHECK(kv.contains("prefixHitRate"));
  CHECK(r["result"]["scheduler"]["steps"].get<int>() > 0);
  CHECK(r["result"]["scheduler"]["requests"].get<int>() >= 1);  // the second answer came from the completion cache
  // The automatic plan, each choice with its reason, and the machine it was made for.
  const json& plan = r["result"]["plan"];
  CHECK(plan["ok"] == true);
  CHECK(plan["weights"] == "ram");
  REQUIRE(plan["reasons"].is_array());
  CHECK(plan["reasons"].size() >= 8);
  for (const auto& reason : plan["reasons"]) CHECK(!reason["why"].get<std::string>().empty());
  CHECK(r["result"]["hardware"]["cpu"]["physical"].get<int>() >= 1);
  CHECK(r["result"]["experts"].contains("predictionAccuracy"));
}

TEST_CASE("every command the server attaches or handles is advertised, and accepting is counted") {
  Client c;
  json caps = {{"textDocument", {{"inlineCompletion", json::object()}}},
               {"workspace", {{"executeCommand", json::object()}}}};
  c.request(1, "initialize", {{"capabilities", caps}, {"initializationOptions", model_options()}});
  const json init = c.response();
  c.notify("initialized");
  REQUIRE(init["result"]["capabilities"].contains("executeCommandProvider"));
  const auto advertised =
      init["result"]["capabilities"]["executeCommandProvider"]["commands"].get<std::vector<std::string>>();
  wait_ready(c);
  // Each advertised command is handled: none is answered "unknown command"
  // (arguments are left out, so the chat commands refuse them instead).
  int id = 100;
  for (const auto& cmd : advertised) {
    c.request(++id, "workspace/executeCommand", {{"command", cmd}, {"arguments", json::array()}});
    const json r = c.response();
    INFO(cmd << ": " << r.dump());
    if (r.contains("error"))
      CHECK(r["error"]["message"].get<std::string>().find("unknown command") == std::string::npos);
  }
  // ... and what is not advertised is not handled.
  c.request(++id, "workspace/executeCommand", {{"command", "moelsp.nope"}});
  json r = c.response();
  REQUIRE(r.contains("error"));
  CHECK(r["error"]["message"].get<std::string>().find("unknown command") != std::string::npos);
  // The command on an inline item is one of them, and running it counts an accept.
  const std::string uri = "file:///t/cmd.py";
  c.notify("textDocument/didOpen",
           {{"textDocument",
             {{"uri", uri}, {"languageId", "python"}, {"version", 1}, {"text", "def area(w, h):\n    return "}}}});
  c.request(++id, "textDocument/inlineCompletion",
            {{"textDocument", {{"uri", uri}}},
             {"position", {{"line", 1}, {"character", 11}}},
             {"context", {{"triggerKind", 1}}}});
  r = c.response();
  for (const auto& item : r["result"]["items"]) {
    const std::string cmd = item["command"]["command"];
    CHECK(std::find(advertised.begin(), advertised.end(), cmd) != advertised.end());
  }
  c.request(++id, "moelsp/status");
  const int before = c.response()["result"]["completions"]["accepted"];
  c.request(++id, "workspace/executeCommand", {{"command", "moelsp.accepted"}});
  CHECK(c.response()["result"].is_null());
  c.request(++id, "moelsp/status");
  CHECK(c.response()["result"]["completions"]["accepted"] == before + 1);
}

TEST_CASE("a configuration change to engine-level settings reloads the engine in place") {
  Client c;
  c.initialize(model_options());
  wait_ready(c);
  c.notify("workspace/didChangeConfiguration", {{"settings", {{"moelsp", {{"kvCache", {{"tokens", 2048}}}}}}}});
  bool reloading = false;
  for (;;) {  // loading, then ready again, with the new plan
    const json m = c.next();
    if (m.value("method", "") == "window/logMessage" &&
        m["params"]["message"].get<std::string>().find("reloading") != std::string::npos)
      reloading = true;
    if (m.value("method", "") == "moelsp/status" && reloading && m["params"]["state"] == "ready") break;
  }
  c.request(2, "moelsp/status");
  const json st = c.response()["result"];
  CHECK(st["plan"]["kvCache"]["tokens"] == 2048);
  // The same settings again (editors echo them): no reload.
  c.notify("workspace/didChangeConfiguration", {{"settings", {{"moelsp", {{"kvCache", {{"tokens", 2048}}}}}}}});
  c.request(3, "moelsp/status");
  CHECK(c.response()["result"]["state"] == "ready");
}

TEST_CASE("a model that fails to load is shown once, and fixing the setting loads it without a restart") {
  Client c;
  json opts = model_options();
  opts["model"] = "/no/such/model.gguf";
  c.initialize(opts);
  bool shown = false;
  for (;;) {
    const json m = c.next();
    if (m.value("method", "") == "window/showMessage") {
      CHECK(m["params"]["type"] == 1);
      CHECK_THAT(m["params"]["message"].get<std::string>(),
                 Catch::Contains("/no/such/model.gguf") && Catch::Contains("moelsp.model"));
      shown = true;
    }
    if (m.value("method", "") == "moelsp/status" && m["params"]["state"] == "error") break;
  }
  CHECK(shown);
  const std::string uri = "file:///t/fix.py";
  c.notify("textDocument/didOpen",
           {{"textDocument", {{"uri", uri}, {"languageId", "python"}, {"version", 1}, {"text", "def f(x):\n    "}}}});
  // Completions answer an empty list (not an error per keystroke); the status says why.
  c.request(2, "textDocument/completion",
            {{"textDocument", {{"uri", uri}}}, {"position", {{"line", 1}, {"character", 4}}}});
  json r = c.response();
  CHECK(r["result"]["items"].empty());
  CHECK(r["result"]["isIncomplete"] == true);
  c.notify("workspace/didChangeConfiguration", {{"settings", {{"moelsp", {{"model", model_options()["model"]}}}}}});
  wait_ready(c);
  c.request(3, "textDocument/inlineCompletion",
            {{"textDocument", {{"uri", uri}}}, {"position", {{"line", 1}, {"character", 4}}}});
  r = c.response();
  CHECK(r.contains("result"));
}

TEST_CASE("moelsp/status carries its rendered summary and line, the same words for every editor") {
  Client c;
  c.initialize(model_options());
  wait_ready(c);
  c.request(2, "moelsp/status");
  const json st = c.response()["result"];
  INFO(st.dump());
  const std::string summary = st["summary"], line = st["summaryLine"];
  CHECK_THAT(summary, Catch::StartsWith("state:        ready"));
  CHECK_THAT(summary, Catch::Contains("\nplan:         cpu, 2 threads"));
  CHECK_THAT(summary, Catch::Contains("\ncompletions:  0 requests"));
  CHECK_THAT(summary, Catch::Contains("\ncontrols:     trigger automatic, snoozed no"));
  CHECK_THAT(summary, Catch::Contains("\n## plan\n- "));
  CHECK_THAT(line, Catch::StartsWith("moelsp ready (" + st["model"].get<std::string>() + ")"));
  CHECK_THAT(line, Catch::Contains("; completions: 0 asked"));
  c.request(3, "workspace/executeCommand", {{"command", "moelsp.snooze"}, {"arguments", {2}}});
  c.response();
  c.request(4, "moelsp/status");
  const json snoozed = c.response()["result"];
  CHECK_THAT(snoozed["summaryLine"].get<std::string>(), Catch::Contains("[snoozed for 12"));
  CHECK_THAT(snoozed["summary"].get<std::string>(), Catch::Contains("controls:     trigger automatic, snoozed for 1"));
}

TEST_CASE("plan overrides arrive as LSP settings and the plan says so") {
  Client c;
  json opts = model_options();
  opts["kvCache"] = {{"blockSize", 8}};
  opts["experts"] = {{"prefetch", true}, {"prefetchDistance", 2}, {"cacheMb", 1}};
  opts["batch.max"] = 3;
  c.initialize(opts);
  wait_ready(c);
  c.request(2, "moelsp/status");
  const json r = c.response();
  const json& plan = r["result"]["plan"];
  CHECK(plan["kvCache"]["blockSize"] == 8);
  CHECK(plan["experts"]["prefetch"] == true);
  CHECK(plan["experts"]["prefetchDistance"] == 2);
  CHECK(plan["batch"]["max"] == 3);
  int user = 0;
  for (const auto& reason : plan["reasons"]) user += reason["why"] == "set by the user";
  CHECK(user >= 3);
  CHECK(r["result"]["experts"]["cacheExperts"].get<int>() > 0);
}

TEST_CASE("$/cancelRequest answers RequestCancelled promptly, a newer request cancels the older") {
  Client c;
  json opts = model_options();
  // Requests that would run for minutes: a long debounce holds them (a
  // generation of 100000 tokens no longer does: the random model's text turns
  // into a loop, which ends decoding early).
  opts["completion"] = {{"maxTokens", 65536}, {"timeBudgetMs", 600000}, {"debounceMs", 600000}};
  c.initialize(opts);
  wait_ready(c);
  const std::string uri = "file:///t/b.py";
  // malformed didOpen (fields outside textDocument): logged, no answer, no crash
  c.notify("textDocument/didOpen", {{"textDocument", {{"uri", uri}}}, {"text", 5}});
  c.notify("textDocument/didOpen",
           {{"textDocument", {{"uri", uri}, {"languageId", "python"}, {"version", 1}, {"text", "import os\n"}}}});
  c.request(30, "textDocument/inlineCompletion",
            {{"textDocument", {{"uri", uri}}}, {"position", {{"line", 1}, {"character", 0}}}});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t0 = std::chrono::steady_clock::now();
  c.notify("$/cancelRequest", {{"id", 30}});
  json r = c.response();
  CHECK(r["id"] == 30);
  CHECK(r["error"]["code"] == -32800);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  // two requests for the same document: the first is superseded
  c.request(31, "textDocument/inlineCompletion",
            {{"textDocument", {{"uri", uri}}}, {"position", {{"line", 1}, {"character", 0}}}});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  c.request(32, "textDocument/inlineCompletion",
            {{"textDocument", {{"uri", uri}}}, {"position", {{"line", 1}, {"character", 0}}}});
  r = c.response();
  CHECK(r["id"] == 31);
  CHECK(r["error"]["code"] == -32800);
  c.notify("$/cancelRequest", {{"id", 32}});
  CHECK(c.response()["id"] == 32);
  // and the server still works
  c.request(33, "moelsp/status");
  CHECK(c.response()["id"] == 33);
}

TEST_CASE("one $/cancelRequest cancels every request in flight under that id") {
  Client c;
  json opts = model_options();
  opts["completion"] = {{"maxTokens", 64}, {"timeBudgetMs", 600000}, {"debounceMs", 600000}};  // held until cancelled
  c.initialize(opts);
  wait_ready(c);
  // Two documents, so that neither request supersedes the other; one id for
  // both (a protocol error some clients make): the cancel reaches both.
  for (const char* uri : {"file:///t/d1.py", "file:///t/d2.py"}) {
    c.notify("textDocument/didOpen",
             {{"textDocument", {{"uri", uri}, {"languageId", "python"}, {"version", 1}, {"text", "import os\n"}}}});
    c.request(40, "textDocument/inlineCompletion",
              {{"textDocument", {{"uri", uri}}}, {"position", {{"line", 1}, {"character", 0}}}});
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t0 = std::chrono::steady_clock::now();
  c.notify("$/cancelRequest", {{"id", 40}});
  for (int i = 0; i < 2; ++i) {
    const json r = c.response();
    CHECK(r["id"] == 40);
    CHECK(r["error"]["code"] == -32800);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}

TEST_CASE("chat streams through $/progress, explain works on a selection, templates are required") {
  Client c;
  json opts = model_options();
  opts["chat"] = {{"maxTokens", 12}};
  c.send({{"jsonrpc", "2.0"},
          {"id", 1},
          {"method", "initialize"},
          {"params",
           {{"capabilities",
             {{"workspace", {{"executeCommand", json::object()}}}, {"window", {{"workDoneProgress", true}}}}},
            {"initializationOptions", opts}}}});
  json init = c.response();
  CHECK(init["result"]["capabilities"].contains("executeCommandProvider"));
  CHECK(!init["result"]["capabilities"].contains("inlineCompletionProvider"));  // the client did not declare it
  wait_ready(c);
  // The reference model has no chat template: a clear error naming the setting.
  c.request(40, "moelsp/chat", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  json r = c.response();
  INFO(r.dump());
  CHECK(r["error"]["code"] == -32602);  // the conversation cannot be rendered as asked: the request's side
  CHECK_THAT(r["error"]["message"].get<std::string>(), Catch::Contains("chat.template"));
  c.notify("workspace/didChangeConfiguration", {{"settings", {{"moelsp", {{"chat", {{"template", "chatml"}}}}}}}});
  c.request(
      41, "moelsp/chat",
      {{"messages", {{{"role", "user"}, {"content", "Write a Python hello world."}}}}, {"partialResultToken", "p41"}});
  std::string streamed;
  for (;;) {
    const json m = c.next();
    if (m.value("method", "") == "$/progress" && m["params"]["token"] == "p41")
      streamed += m["params"]["value"]["text"].get<std::string>();
    if (m.contains("id") && m["id"] == 41) {
      r = m;
      break;
    }
  }
  REQUIRE(r.contains("result"));
  CHECK(r["result"]["text"] == streamed);
  CHECK(!streamed.empty());
  // explain on a selection, with work-done progress
  const std::string uri = "file:///t/c.py";
  c.notify("textDocument/didOpen",
           {{"textDocument",
             {{"uri", uri}, {"languageId", "python"}, {"version", 1}, {"text", "def f(x):\n    return x * 2\n"}}}});
  json range = {{"start", {{"line", 0}, {"character", 0}}}, {"end", {{"line", 2}, {"character", 0}}}};
  json arg = {{"uri", uri}, {"range", range}};
  c.request(42, "workspace/executeCommand",
            {{"command", "moelsp.explain"}, {"workDoneToken", "w42"}, {"arguments", json::array({arg})}});
  bool begin = false, end = false;
  for (;;) {
    const json m = c.next();
    if (m.value("method", "") == "$/progress" && m["params"]["token"] == "w42") {
      const std::string kind = m["params"]["value"]["kind"];
      begin |= kind == "begin";
      end |= kind == "end";
    }
    if (m.contains("id") && m["id"] == 42) {
      r = m;
      break;
    }
  }
  CHECK(begin);
  CHECK(end);
  CHECK(r["result"]["text"].is_string());
  // The turn as the server asked it: the editors keep it for follow-ups (they spell no questions of their own).
  CHECK(r["result"]["question"] == "Explain what this code does.\n\n```python\ndef f(x):\n    return x * 2\n```");
  // moelsp/chat asks the same with a kind, and code the server does not have open.
  c.request(45, "moelsp/chat", {{"kind", "fix"}, {"code", "int f() { return 1 }"}, {"language", "c"}});
  r = c.response();
  INFO(r.dump());
  CHECK(r["result"]["question"] ==
        "Find the bugs in this code and give a fixed version.\n\n```c\nint f() { return 1 }\n```");
  c.request(46, "moelsp/chat", {{"kind", "poem"}, {"code", "x"}});
  r = c.response();
  CHECK(r["error"]["code"] == -32602);
  CHECK_THAT(r["error"]["message"].get<std::string>(), Catch::Contains("kind"));
  c.request(43, "workspace/executeCommand", {{"command", "moelsp.fix"}, {"arguments", json::array()}});
  CHECK(c.response()["error"]["code"] == -32602);
  // A file far larger than the context (1024 tokens): the code is cut to fit and the answer comes.
  std::string big;
  for (int i = 0; i < 400; ++i) big += "def f" + std::to_string(i) + "(x):\n    return x * " + std::to_string(i) + "\n";
  c.notify("textDocument/didOpen",
           {{"textDocument", {{"uri", "file:///t/big.py"}, {"languageId", "python"}, {"version", 1}, {"text", big}}}});
  c.request(44, "moelsp/chat",
            {{"messages", {{{"role", "user"}, {"content", "What does f3 do?"}}}}, {"uri", "file:///t/big.py"}});
  r = c.response();
  INFO(r.dump());
  REQUIRE(r.contains("result"));
  CHECK(r["result"]["text"].is_string());
}

TEST_CASE("cache and type-through answer instantly, Invoked offers alternatives, telemetry counts") {
  Client c;
  c.initialize(model_options());
  wait_ready(c);
  const std::string uri = "file:///t/d.py";
  const std::string text = "import os\n\ndef main():\n    ";
  c.notify("textDocument/didOpen",
           {{"textDocument", {{"uri", uri}, {"languageId", "python"}, {"version", 1}, {"text", text}}}});
  const json pos = {{"line", 3}, {"character", 4}};
  c.request(50, "textDocument/inlineCompletion", {{"textDocument", {{"uri", uri}}}, {"position", pos}});
  json r = c.response();
  REQUIRE(r["result"]["items"].is_array());
  if (!r["result"]["items"].empty()) {
    const std::string first = r["result"]["items"][0]["insertText"];
    // same request again: from the cache
    c.request(51, "textDocument/inlineCompletion", {{"textDocument", {{"uri", uri}}}, {"position", pos}});
    CHECK(c.response()["result"]["items"][0]["insertText"] == first);
    // type the first character of the suggestion: the rest comes back
    if (first.size() > 1 && first[0] != '\n') {
      c.notify("textDocument/didChange",
               {{"textDocument", {{"uri", uri}, {"version", 2}}},
                {"contentChanges", {{{"range", {{"start", pos}, {"end", pos}}}, {"text", first.substr(0, 1)}}}}});
      c.request(52, "textDocument/inlineCompletion",
                {{"textDocument", {{"uri", uri}}}, {"position", {{"line", 3}, {"character", 5}}}});
      CHECK(c.response()["result"]["items"][0]["insertText"] == first.substr(1));
    }
  }
  c.request(53, "textDocument/inlineCompletion",
            {{"textDocument", {{"uri", uri}}}, {"position", pos}, {"context", {{"triggerKind", 1}}}});
  r = c.response();
  CHECK(r["result"]["items"].size() <= 3);
  c.notify("moelsp/didShowCompletion", {{"item", json::object()}});
  c.notify("textDocument/didShowCompletion", {{"item", json::object()}});
  c.notify("moelsp/didAcceptCompletion", {{"item", json::object()}});
  c.notify("textDocument/didPartiallyAcceptCompletion", {{"item", json::object()}, {"acceptedLength", 3}});
  c.request(54, "moelsp/status");
  r = c.response();
  const json& t = r["result"]["completions"];
  CHECK(t["requests"].get<int>() >= 2);
  CHECK(t["shown"] == 2);
  CHECK(t["accepted"] == 1);
  CHECK(t["partiallyAccepted"] == 1);
  CHECK(t["latencyMs"]["samples"].get<int>() >= 1);
  CHECK(t["promptTokens"].get<int>() > 0);
  CHECK(t["promptTokensReused"].get<int>() <= t["promptTokens"].get<int>());
  // Where the answers' time went: the parts add up to no more than the total.
  const json& b = t["breakdown"];
  CHECK(b["answers"].get<int>() >= 1);
  CHECK(b["answers"].get<int>() <= t["latencyMs"]["samples"].get<int>());
  CHECK(b["promptTokensNew"].get<int>() > 0);
  CHECK(b["generatedTokens"].get<int>() >= 0);
  const double parts = b["queueMs"].get<double>() + b["promptMs"].get<double>() + b["generateMs"].get<double>();
  CHECK(b["promptMs"].get<double>() > 0);
  CHECK(parts <= b["totalMs"].get<double>() + 1e-6);
}

TEST_CASE("cancel storm: 200 cancelled completions, then a normal one succeeds") {
  Client c;
  json opts = model_options();
  opts["completion"] = {{"maxTokens", 16}, {"timeBudgetMs", 5000}};
  c.initialize(opts);
  wait_ready(c);
  const std::string uri = "file:///t/e.py";
  c.notify("textDocument/didOpen",
           {{"textDocument", {{"uri", uri}, {"languageId", "python"}, {"version", 1}, {"text", "x = 1\n"}}}});
  c.request(999, "textDocument/inlineCompletion",
            {{"textDocument", {{"uri", uri}}}, {"position", {{"line", 1}, {"character", 0}}}});
  CHECK(c.response()["id"] == 999);  // warm: KV caches and worker threads exist
  const auto [threads_before, rss_before] = proc_status();
  for (int i = 0; i < 200; ++i) {
    c.request(1000 + i, "textDocument/inlineCompletion",
              {{"textDocument", {{"uri", uri}}}, {"position", {{"line", 1}, {"character", 0}}}});
    c.notify("$/cancelRequest", {{"id", 1000 + i}});
  }
  std::set<int> answered;
  while (answered.size() < 200) {
    const json r = c.response();
    const int rid = r["id"];
    REQUIRE(rid >= 1000);
    CHECK((r.contains("result") || r["error"]["code"] == -32800));
    answered.insert(rid);
  }
  c.request(2000, "textDocument/inlineCompletion",
            {{"textDocument", {{"uri", uri}}}, {"position", {{"line", 1}, {"character", 0}}}});
  const json r = c.response();
  CHECK(r["id"] == 2000);
  CHECK(r.contains("result"));
  // nothing leaked: threads as before the storm, memory within a few MB
  const auto [threads_after, rss_after] = proc_status();
  CHECK(threads_after == threads_before);
  CHECK(rss_after < rss_before + 64 * 1024);
}

TEST_CASE("bad input: invalid UTF-8 in a document, a truncated body at the end") {
  Client c;
  c.initialize(model_options());
  wait_ready(c);
  // invalid UTF-8 inside a JSON string (raw bytes): repaired to U+FFFD, the request is answered
  const std::string bad = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"moelsp/status\",\"x\":\"\xff\xfe\"}";
  c.raw("Content-Length: " + std::to_string(bad.size()) + "\r\n\r\n" + bad);
  json r = c.response();
  CHECK(r["id"] == 7);
  CHECK(r.contains("result"));
  // a didOpen whose text holds a lone surrogate (JavaScript strings can) and a
  // stray byte: the document opens, those characters become U+FFFD
  const std::string open =
      "{\"jsonrpc\":\"2.0\",\"method\":\"textDocument/didOpen\",\"params\":{\"textDocument\":"
      "{\"uri\":\"file:///t/s.py\",\"languageId\":\"python\",\"version\":1,"
      "\"text\":\"x = '\\ud800'\xc3 # \\ud83e\\udd99\\n\"}}}";
  c.raw("Content-Length: " + std::to_string(open.size()) + "\r\n\r\n" + open);
  c.request(8, "textDocument/inlineCompletion",
            {{"textDocument", {{"uri", "file:///t/s.py"}}}, {"position", {{"line", 1}, {"character", 0}}}});
  r = c.response();
  CHECK(r["id"] == 8);
  CHECK(r.contains("result"));  // not "document not open"
  // garbage that is not JSON at all is still a parse error
  c.raw("Content-Length: 5\r\n\r\n{{{{{");
  CHECK(c.response()["error"]["code"] == -32700);
  // a document with unusual but valid text (NUL, BOM, astral characters, lone CR)
  c.notify("textDocument/didOpen", {{"textDocument",
                                     {{"uri", "file:///t/f.py"},
                                      {"languageId", "python"},
                                      {"version", 1},
                                      {"text", std::string("\xef\xbb\xbfx = '\0\xf0\x9f\xa6\x99'\r", 16) + "\n"}}}});
  c.request(60, "textDocument/inlineCompletion",
            {{"textDocument", {{"uri", "file:///t/f.py"}}}, {"position", {{"line", 1}, {"character", 0}}}});
  r = c.response();
  CHECK(r["id"] == 60);
  CHECK(r.contains("result"));
  // truncated body: the server sees end of input and exits with 1 (no shutdown)
  c.raw("Content-Length: 100\r\n\r\n{\"jsonrpc\"");
  CHECK(c.exit_code() == 1);
}

TEST_CASE("dynamic registration is honoured, selectedCompletionInfo shapes the inline item") {
  Client c;
  c.request(
      1, "initialize",
      {{"capabilities",
        {{"textDocument", {{"completion", {{"dynamicRegistration", true}}}, {"inlineCompletion", json::object()}}}}},
       {"initializationOptions", model_options()}});
  const json init = c.response();
  CHECK(!init["result"]["capabilities"].contains("completionProvider"));  // registered dynamically instead
  CHECK(init["result"]["capabilities"].contains("inlineCompletionProvider"));
  c.notify("initialized");
  bool registered = false, ready = false;
  while (!registered || !ready) {
    const json m = c.next();
    if (m.value("method", "") == "client/registerCapability") {
      for (const auto& r : m["params"]["registrations"]) registered |= r["method"] == "textDocument/completion";
      c.send({{"jsonrpc", "2.0"}, {"id", m["id"]}, {"result", nullptr}});
    }
    if (m.value("method", "") == "moelsp/status" && m["params"]["state"] == "ready") ready = true;
  }
  const std::string uri = "file:///t/g.py";
  c.notify("textDocument/didOpen",
           {{"textDocument", {{"uri", uri}, {"languageId", "python"}, {"version", 1}, {"text", "import os\nos.pa"}}}});
  const json range = {{"start", {{"line", 1}, {"character", 3}}}, {"end", {{"line", 1}, {"character", 5}}}};
  c.request(70, "textDocument/inlineCompletion",
            {{"textDocument", {{"uri", uri}}},
             {"position", {{"line", 1}, {"character", 5}}},
             {"context", {{"triggerKind", 2}, {"selectedCompletionInfo", {{"range", range}, {"text", "path"}}}}}});
  const json r = c.response();
  REQUIRE(r["result"]["items"].is_array());
  for (const auto& it : r["result"]["items"]) {
    CHECK(it["insertText"].get<std::string>().rfind("path", 0) == 0);
    CHECK(it["range"] == range);
  }
}

TEST_CASE("typed params: a wrong field is -32602 naming it, and a bad setting is reported while the others apply") {
  Client c;
  json opts = model_options();
  opts["threads"] = 5000;  // out of range: reported, the plan decides instead
  c.request(1, "initialize", {{"capabilities", json::object()}, {"initializationOptions", opts}});
  bool warned = false;
  for (;;) {
    const json m = c.next();
    if (m.value("method", "") == "window/showMessage")
      warned |= m["params"]["message"].get<std::string>().find("threads") != std::string::npos;
    if (m.value("method", "") == "moelsp/status" && m["params"]["state"] == "ready") break;
    if (m.value("method", "") == "moelsp/status") REQUIRE(m["params"]["state"] != "error");
  }
  CHECK(warned);
  const auto error_of = [&](int id, const std::string& method, const json& params) {
    c.request(id, method, params);
    const json r = c.response();
    CHECK(r["id"] == id);
    CHECK(r["error"]["code"] == -32602);
    return r["error"]["message"].get<std::string>();
  };
  CHECK_THAT(error_of(2, "textDocument/inlineCompletion",
                      {{"textDocument", {{"uri", "file:///a.py"}}}, {"position", {{"line", "one"}, {"character", 0}}}}),
             Catch::Contains("position.line") && Catch::Contains("integer"));
  CHECK_THAT(error_of(3, "textDocument/completion", {{"position", {{"line", 0}, {"character", 0}}}}),
             Catch::Contains("textDocument: missing"));
  CHECK_THAT(error_of(4, "moelsp/chat", {{"messages", {{{"role", "user"}, {"content", 5}}}}}),
             Catch::Contains("messages[0].content"));
  CHECK_THAT(error_of(5, "workspace/executeCommand", {{"command", 7}}), Catch::Contains("command"));
  CHECK_THAT(error_of(6, "textDocument/inlineCompletion", json::array({1, 2})), Catch::Contains("expected an object"));
  // A malformed notification is logged and dropped; the server goes on.
  c.notify("textDocument/didChange", {{"textDocument", {{"uri", 5}}}, {"contentChanges", "x"}});
  c.request(7, "moelsp/status");
  CHECK(c.response()["result"]["state"] == "ready");
}

TEST_CASE("a completion is answered while four long chats run (completions have their own lane)") {
  Client c;
  json opts = model_options();
  opts["contextSize"] = 4096;
  opts["chat"] = {{"maxTokens", 2000}, {"template", "chatml"}};
  c.initialize(opts);
  wait_ready(c);
  const std::string uri = "file:///t/lanes.py";
  c.notify(
      "textDocument/didOpen",
      {{"textDocument", {{"uri", uri}, {"languageId", "python"}, {"version", 1}, {"text", "def add(a, b):\n    "}}}});
  for (int i = 0; i < 4; ++i)
    c.request(100 + i, "moelsp/chat",
              {{"messages", {{{"role", "user"}, {"content", "Tell a long story " + std::to_string(i)}}}}});
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the chats hold their workers
  c.request(200, "textDocument/inlineCompletion",
            {{"textDocument", {{"uri", uri}}}, {"position", {{"line", 1}, {"character", 4}}}});
  // The completion's answer comes first: with one shared pool of four
  // workers it waited for a chat to end.
  const json first = c.response(60000);
  CHECK(first["id"] == 200);
  CHECK(first.contains("result"));
  for (int i = 0; i < 4; ++i) c.notify("$/cancelRequest", {{"id", 100 + i}});
  // Each chat was still running then: it ends cancelled.
  for (int i = 0; i < 4; ++i) CHECK(c.response(60000)["error"]["code"] == -32800);
}

TEST_CASE("a request is answered exactly once: a second answer is dropped, none becomes -32603") {
  std::vector<json> sent;
  const auto capture = [&](const json& j) { sent.push_back(j); };
  {
    Reply r(7, capture, "moelsp/chat");
    Reply copy = r;  // handlers pass it on to workers
    r({{"text", "a"}});
    copy.error(-32800, "request cancelled");  // too late: dropped
  }
  REQUIRE(sent.size() == 1);
  CHECK(sent[0]["id"] == 7);
  CHECK(sent[0]["result"]["text"] == "a");
  sent.clear();
  {
    Reply r("x", capture, "textDocument/inlineCompletion");
    Reply worker_copy = r;
  }  // every handle gone unanswered (a handler that returned or threw without replying)
  REQUIRE(sent.size() == 1);
  CHECK(sent[0]["id"] == "x");
  CHECK(sent[0]["error"]["code"] == -32603);
  CHECK_THAT(sent[0]["error"]["message"].get<std::string>(), Catch::Contains("textDocument/inlineCompletion"));
}

TEST_CASE("JSON text repair: bad UTF-8 and lone surrogates become U+FFFD, valid text is untouched") {
  const std::string good = R"({"t":"a\u00e9\ud83e\udd99\\ud800"})";  // a pair, and an escaped backslash before "ud800"
  CHECK(repair_json_text(good) == good);
  CHECK(repair_json_text("\"\xf0\x9f\xa6\x99\"") == "\"\xf0\x9f\xa6\x99\"");
  CHECK(repair_json_text(R"("\ud800x")") == R"("\ufffdx")");
  CHECK(repair_json_text(R"("\udc00\ud800")") == R"("\ufffd\ufffd")");
  CHECK(repair_json_text("\"\xff\xc3(\xe2\x82\"") == "\"\xef\xbf\xbd\xef\xbf\xbd(\xef\xbf\xbd\xef\xbf\xbd\"");
  CHECK(repair_json_text("\"\xc0\xaf\"") == "\"\xef\xbf\xbd\xef\xbf\xbd\"");                         // overlong
  CHECK(!json::parse(repair_json_text("{\"t\":\"\xed\xa0\x80\"}"), nullptr, false).is_discarded());  // UTF-8 surrogate
}

TEST_CASE("didOpen with a mistyped version or languageId still opens, a reversed edit range is refused") {
  const auto open = parse_params<DidOpenParams>(
      json{{"textDocument", {{"uri", "file:///a.py"}, {"languageId", 7}, {"version", "one"}, {"text", "x = 1\n"}}}});
  CHECK(open.text_document.uri == "file:///a.py");
  CHECK(open.text_document.language_id.empty());
  CHECK(open.text_document.version == 0);
  CHECK_THROWS_WITH(parse_params<DidOpenParams>(json{{"textDocument", {{"uri", "file:///a.py"}}}}),
                    Catch::Contains("textDocument.text: missing"));
  const json reversed = {
      {"textDocument", {{"uri", "file:///a.py"}, {"version", 2}}},
      {"contentChanges",
       {{{"range", {{"start", {{"line", 0}, {"character", 4}}}, {"end", {{"line", 0}, {"character", 1}}}}},
         {"text", "y"}}}}};
  CHECK_THROWS_WITH(parse_params<DidChangeParams>(reversed),
                    Catch::Contains("contentChanges[0].range") && Catch::Contains("before its start"));
  CHECK_THROWS_WITH(parse_params<CompletionParams>(json{{"textDocument", {{"uri", "u"}}},
                                                        {"position", {{"line", 4294967297LL}, {"character", 0}}}}),
                    Catch::Contains("position.line"));
}
