// The assistant service on the embedded engine (a reference model): the
// completion pipeline's cache, type-through, alternatives and superseding,
// and chat's streaming and errors — without any protocol around them.
#include <chrono>
#include <thread>

#include <catch2/catch.hpp>

#include "assist/service.h"
#include "test_data.h"

using namespace moelsp;
using namespace moelsp::assist;

namespace {

std::shared_ptr<EngineBackend> backend(const std::string& name = "qwen3moe-ref") {
  auto m = std::shared_ptr<Model>(Model::load(test::data_path("reference/" + name + ".gguf"), {.threads = 2}));
  return std::make_shared<EngineBackend>(std::make_unique<Engine>(m, EngineOptions{.n_ctx = 1024}));
}

CompletionQuery query(const std::string& text, bool invoked = false) {
  CompletionQuery q;
  q.text = text;
  q.cursor = text.size();
  q.invoked = invoked;
  q.settings = {.max_tokens = 8, .time_budget_ms = 5000, .debounce_ms = 0};
  return q;
}

}  // namespace

TEST_CASE("without a backend: completions are empty, chat says the model is not loaded") {
  Service s;
  Ticket t;
  const CompletionAnswer a = s.complete(query("def f():\n    "), t);
  CHECK(a.texts.empty());
  CHECK(a.error.empty());
  Ticket t2;
  ChatQuery q;
  q.messages = {{"user", "hi"}};
  const ChatAnswer c = s.chat(q, nullptr, t2);
  CHECK(c.reason == FinishReason::Error);
  CHECK_THAT(c.error, Catch::Contains("not loaded"));
}

TEST_CASE("completions: the cache answers a repeat and a typed-through suggestion; Invoked asks the model") {
  Service s;
  s.set_backend(backend());
  const std::string text = "import os\n\ndef main():\n    ";
  Ticket t1;
  const CompletionAnswer first = s.complete(query(text), t1);
  REQUIRE(first.error.empty());
  CHECK(!first.from_cache);
  if (!first.texts.empty()) {
    Ticket t2;
    const CompletionAnswer again = s.complete(query(text), t2);
    CHECK(again.from_cache);
    CHECK(again.texts == first.texts);
    const std::string& sug = first.texts.front();
    if (sug.size() > 1) {
      Ticket t3;
      const CompletionAnswer typed = s.complete(query(text + sug.substr(0, 1)), t3);
      CHECK(typed.from_cache);
      REQUIRE(!typed.texts.empty());
      CHECK(typed.texts.front() == sug.substr(1));
    }
  }
  Ticket t4;
  const CompletionAnswer invoked = s.complete(query(text, true), t4);
  CHECK(!invoked.from_cache);
  CHECK(invoked.texts.size() <= 3);
  const TelemetrySnapshot tel = s.telemetry();
  CHECK(tel.requests >= 2);
  CHECK(tel.prompt_tokens > 0);
  CHECK(tel.latency_samples >= 2);
}

TEST_CASE("a newer request on the same stream cancels the older; other streams are left alone") {
  Service s;
  auto a = std::make_shared<Ticket>(), b = std::make_shared<Ticket>(), other = std::make_shared<Ticket>();
  s.claim("file:///a.py", a);
  s.claim("file:///b.py", other);
  s.claim("file:///a.py", b);
  CHECK(a->cancelled());
  CHECK(!b->cancelled());
  CHECK(!other->cancelled());
  // A cancelled request ends at once, even inside its debounce wait.
  s.set_backend(backend());
  CompletionQuery q = query("def f():\n    ");
  q.settings.debounce_ms = 60000;
  const auto t0 = std::chrono::steady_clock::now();
  const CompletionAnswer ans = s.complete(q, *a);
  CHECK(ans.cancelled);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  s.release("file:///a.py", b);
  CHECK(s.telemetry().cancelled == 1);
}

TEST_CASE("chat streams through on_text; the model's missing template is a clear error") {
  Service s;
  s.set_backend(backend());
  ChatQuery q;
  q.messages = {{"user", "Write a function."}};
  q.max_tokens = 12;
  Ticket t1;
  const ChatAnswer refused = s.chat(q, nullptr, t1);
  CHECK(refused.reason == FinishReason::Error);
  CHECK_THAT(refused.error, Catch::Contains("chat.template"));
  q.template_override = "chatml";
  q.code = "def area(w, h):\n    return w * h\n";
  q.language = "python";
  std::string streamed;
  int pieces = 0;
  Ticket t2;
  const ChatAnswer a = s.chat(q, [&](const std::string& text) { streamed += text, ++pieces; }, t2);
  CHECK(a.reason != FinishReason::Error);
  CHECK(streamed == a.text);
  CHECK(pieces >= 1);
  CHECK(!s.busy());
}
