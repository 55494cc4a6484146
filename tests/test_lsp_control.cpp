// The user's controls over completions, through the protocol: per-language
// rules, manual-only mode and a snooze (assist/completion_gate.h). What is
// gated is answered with no items and never reaches the model: the server's
// request counter (moelsp/status completions.requests) stays where it was.
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "lsp_client.h"

using json = nlohmann::json;
using namespace moelsp::test;

namespace {

struct Session {
  Client c;
  int id = 100;

  int requests() {
    c.request(++id, "moelsp/status");
    return c.response()["result"]["completions"]["requests"];
  }
  json status() {
    c.request(++id, "moelsp/status");
    return c.response()["result"];
  }
  void open(const std::string& uri, const std::string& language, const std::string& text) {
    c.notify("textDocument/didOpen",
             {{"textDocument", {{"uri", uri}, {"languageId", language}, {"version", 1}, {"text", text}}}});
  }
  // The items of an inline (trigger kind 1: asked, 2: as typed) or classic
  // request at the end of the document's second line.
  json ask(const std::string& uri, int trigger_kind, bool inline_kind = true) {
    json params = {{"textDocument", {{"uri", uri}}}, {"position", {{"line", 1}, {"character", 11}}}};
    if (inline_kind) params["context"] = {{"triggerKind", trigger_kind}};
    c.request(++id, inline_kind ? "textDocument/inlineCompletion" : "textDocument/completion", params);
    const json r = c.response();
    INFO(r.dump());
    REQUIRE(r.contains("result"));
    return r["result"]["items"];
  }
  json command(const std::string& name, json args = json::array()) {
    c.request(++id, "workspace/executeCommand", {{"command", name}, {"arguments", args}});
    return c.response();
  }
  // Counts what reached the model while `fn` ran.
  template <class Fn>
  int served(Fn fn) {
    const int before = requests();
    fn();
    return requests() - before;
  }
};

const std::string kPy = "file:///t/area.py", kMd = "file:///t/notes.md";

}  // namespace

TEST_CASE("completion.languages: markdown gets nothing as you type, an explicit ask is answered") {
  Session s;
  s.c.initialize(model_options());  // the default rules: prose and commit messages off
  wait_ready(s.c);
  s.open(kPy, "python", "def area(w, h):\n    return ");
  s.open(kMd, "markdown", "# Notes\nThe area is ");
  CHECK(s.served([&] { CHECK(s.ask(kMd, 2).empty()); }) == 0);
  CHECK(s.served([&] { CHECK(s.ask(kMd, 0, false).empty()); }) == 0);  // the classic list too
  CHECK(s.served([&] { s.ask(kMd, 1); }) == 1);                        // asked for: answered
  CHECK(s.served([&] { s.ask(kPy, 2); }) == 1);
  // Rules from the editor replace the defaults: markdown on, python off.
  s.c.notify("workspace/didChangeConfiguration",
             {{"settings", {{"moelsp", {{"completion", {{"languages", "*,!python"}}}}}}}});
  CHECK(s.served([&] { s.ask(kMd, 2); }) == 1);
  CHECK(s.served([&] { CHECK(s.ask(kPy, 2).empty()); }) == 0);
}

TEST_CASE("moelsp.snooze: nothing as you type until it ends or moelsp.resume, the status says how long") {
  Session s;
  s.c.initialize(model_options());
  wait_ready(s.c);
  s.open(kPy, "python", "def area(w, h):\n    return ");
  CHECK(s.status()["completions"]["snoozeLeftMs"] == 0);
  const json r = s.command("moelsp.snooze", json::array({0.5}));  // half a minute
  REQUIRE(r.contains("result"));
  const int64_t left = r["result"]["snoozeLeftMs"];
  CHECK(left > 20000);
  CHECK(left <= 30000);
  const int64_t shown = s.status()["completions"]["snoozeLeftMs"];
  CHECK(shown > 0);
  CHECK(shown <= left);
  CHECK(s.served([&] { CHECK(s.ask(kPy, 2).empty()); }) == 0);
  CHECK(s.served([&] { CHECK(s.ask(kPy, 0, false).empty()); }) == 0);
  CHECK(s.served([&] { s.ask(kPy, 1); }) == 1);
  // {"minutes": n} is the same; a bad value is an error naming the argument.
  CHECK(s.command("moelsp.snooze", json::array({{{"minutes", 2}}}))["result"]["snoozeLeftMs"] > 60000);
  const json bad = s.command("moelsp.snooze", json::array({"soon"}));
  REQUIRE(bad.contains("error"));
  CHECK(bad["error"]["code"] == -32602);
  CHECK_THAT(bad["error"]["message"].get<std::string>(), Catch::Contains("arguments[0]"));
  CHECK(s.command("moelsp.resume")["result"]["snoozeLeftMs"] == 0);
  CHECK(s.served([&] { s.ask(kPy, 2); }) == 1);
  // Snoozing for 0 minutes also resumes.
  s.command("moelsp.snooze", json::array({3}));
  CHECK(s.command("moelsp.snooze", json::array({0}))["result"]["snoozeLeftMs"] == 0);
}

TEST_CASE("completion.trigger manual: inline requests only when asked, the classic list is the client's") {
  Session s;
  json opts = model_options();
  opts["completion"]["trigger"] = "manual";
  s.c.initialize(opts);
  wait_ready(s.c);
  s.open(kPy, "python", "def area(w, h):\n    return ");
  CHECK(s.status()["completions"]["trigger"] == "manual");
  CHECK(s.served([&] { CHECK(s.ask(kPy, 2).empty()); }) == 0);
  CHECK(s.served([&] { s.ask(kPy, 1); }) == 1);
  CHECK(s.served([&] { s.ask(kPy, 0, false); }) == 1);
  // A bad value is refused by name; the setting stays.
  s.c.notify("workspace/didChangeConfiguration",
             {{"settings", {{"moelsp", {{"completion", {{"trigger", "sometimes"}}}}}}}});
  CHECK(s.status()["completions"]["trigger"] == "manual");
  s.c.notify("workspace/didChangeConfiguration",
             {{"settings", {{"moelsp", {{"completion", {{"trigger", "automatic"}}}}}}}});
  CHECK(s.served([&] { s.ask(kPy, 2); }) == 1);
}
