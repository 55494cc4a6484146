// The assistant service on the embedded engine (a reference model): the
// completion pipeline's cache, type-through, alternatives and superseding,
// and chat's streaming and errors — without any protocol around them; and
// the pipeline's pieces: post-processing, degenerate-output rules, the FIM
// prompt's budget.
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "assist/completion.h"
#include "assist/service.h"
#include "engine/gguf.h"
#include "engine/harmony.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
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

TEST_CASE("completions: the cache answers a repeat and a typed-through suggestion, Invoked asks the model") {
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

TEST_CASE("completions: other files' code is looked up only when the model runs") {
  Service s;
  s.set_backend(backend());
  const std::string text = "import os\n\ndef main():\n    ";
  int lookups = 0;
  const auto with_context = [&](const std::string& t) {
    CompletionQuery q = query(t);
    q.repo_for = [&](const CompletionQuery&) {
      ++lookups;
      return RepoContext{.repo = "r", .path = "a.py", .snippets = {{"b.py", "def helper():\n", ""}}};
    };
    return q;
  };
  Ticket t1;
  const CompletionAnswer first = s.complete(with_context(text), t1);
  REQUIRE(first.error.empty());
  CHECK(lookups == 1);
  CHECK(first.timings.n_prompt > 0);
  Ticket t2;
  const CompletionAnswer again = s.complete(with_context(text), t2);
  if (!first.texts.empty()) CHECK(again.from_cache);
  CHECK(lookups == (first.texts.empty() ? 2 : 1));  // a suggestion from the cache asks nothing
  Ticket t3;
  t3.cancel();  // a keystroke made moot before the model runs
  s.complete(with_context(text + "x = 1\n"), t3);
  CHECK(lookups == (first.texts.empty() ? 2 : 1));
}

TEST_CASE("a newer request on the same stream cancels the older, other streams are left alone") {
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

TEST_CASE("chat streams through on_text, the model's missing template is a clear error") {
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
  const ChatAnswer a = s.chat(
      q, [&](const std::string& text) { streamed += text, ++pieces; }, t2);
  CHECK(a.reason != FinishReason::Error);
  CHECK(streamed == a.text);
  CHECK(pieces >= 1);
  CHECK(!s.busy());
}

namespace {
// A backend that answers every chat with fixed text, streamed in pieces of
// `piece` bytes: what a harmony model (gpt-oss) generates.
class ScriptedBackend final : public Backend {
 public:
  ScriptedBackend(std::string text, size_t piece) : text_(std::move(text)), piece_(piece) {}
  Generation fim(const FimInput&, Ticket&) override { return {}; }
  Generation text(const TextInput&, const std::function<void(const std::string&)>&, Ticket&) override { return {}; }
  Generation chat(const ChatInput&, const std::function<void(const std::string&)>& on_text, Ticket&) override {
    for (size_t i = 0; i < text_.size(); i += piece_) on_text(text_.substr(i, piece_));
    Generation g;
    g.text = text_;
    g.reason = FinishReason::Eos;
    return g;
  }

 private:
  std::string text_;
  size_t piece_;
};
}  // namespace

TEST_CASE("a harmony answer (gpt-oss) shows only its final channel, the analysis is the reasoning") {
  const std::string harmony =
      "<|channel|>analysis<|message|>The user wants a sum.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>Use `sum(xs)`.";
  for (size_t piece : {size_t(1), size_t(3), size_t(7), harmony.size()}) {
    Service s;
    s.set_backend(std::make_shared<ScriptedBackend>(harmony, piece));
    ChatQuery q;
    q.messages = {{"user", "How do I add a list?"}};
    std::string streamed;
    Ticket t;
    const ChatAnswer a = s.chat(
        q, [&](const std::string& text) { streamed += text; }, t);
    INFO("pieces of " << piece << " bytes");
    CHECK(a.text == "Use `sum(xs)`.");
    CHECK(streamed == a.text);
    CHECK(a.reasoning == "The user wants a sum.\n");
  }
  // Any other model's text passes through, even one that mentions a marker later.
  Service s;
  s.set_backend(std::make_shared<ScriptedBackend>("Call f(); the <|end|> token is special.", 2));
  ChatQuery q;
  q.messages = {{"user", "?"}};
  std::string streamed;
  Ticket t;
  const ChatAnswer a = s.chat(
      q, [&](const std::string& text) { streamed += text; }, t);
  CHECK(a.text == "Call f(); the <|end|> token is special.");
  CHECK(streamed == a.text);
  CHECK(a.reasoning.empty());
}

// The model's own Jinja template gets the whole conversation: tools, an
// assistant's tool calls and the tool's answer (HTTP chat completions pass
// them as JSON), as Qwen3-Coder's template renders them.
TEST_CASE("chat_prompt: tools and tool calls reach the model's Jinja template") {
  const std::string path = (std::filesystem::temp_directory_path() / "moelsp_qwen3coder_template.gguf").string();
  {
    const auto src = gguf::File::open(test::data_path("reference/qwen3moe-ref.gguf"));
    gguf::Writer w;
    for (const auto& [k, v] : src.metadata()) w.set(k, v);
    w.set("tokenizer.chat_template", test::read_file(test::data_path("templates/Qwen3-Coder.jinja")));
    for (const auto& t : src.tensors()) w.add_tensor(t.name, t.type, t.shape, src.tensor_data(t));
    w.write(path);
  }
  auto m = std::shared_ptr<Model>(Model::load(path, {.threads = 2}));
  Service s;
  s.set_backend(std::make_shared<EngineBackend>(std::make_unique<Engine>(m, EngineOptions{.n_ctx = 1024})));
  ChatQuery q;
  q.as_given = true;
  q.messages = {{"user", "Weather in Paris?"}};
  q.messages_json = R"([{"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "0", "content": "18 C, sunny"}])";
  q.template_options.tools_json = R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Current weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";
  const auto prompt = s.chat_prompt(q);
  REQUIRE(prompt);
  CHECK_THAT(*prompt, Catch::Contains("<tools>") && Catch::Contains("<name>get_weather</name>"));
  CHECK_THAT(*prompt, Catch::Contains("<function=get_weather>\n<parameter=city>\nParis\n</parameter>"));
  CHECK_THAT(*prompt, Catch::Contains("<tool_response>\n18 C, sunny\n</tool_response>"));
  CHECK_THAT(*prompt, Catch::EndsWith("<|im_start|>assistant\n"));
  // The same conversation by role and content alone: no tools section.
  q.messages_json.clear();
  q.template_options = {};
  CHECK_THAT(*s.chat_prompt(q), !Catch::Contains("<tools>"));
  std::filesystem::remove(path);
}

// A harmony stream cut anywhere: a header or marker split across pieces is
// held back, never shown half.
TEST_CASE("HarmonyStream holds back partial markers and drops a cut-off header") {
  HarmonyStream h;
  std::string out;
  for (const char* p : {"<|chan", "nel|>final<|mess", "age|>ab<|e", "nd|><|start|>assistant<|channel|>anal"})
    out += h.push(p);
  out += h.finish();
  CHECK(h.is_harmony());
  CHECK(out == "ab");
  CHECK(h.answer() == "ab");
  CHECK(h.reasoning().empty());
}

// ---- the completion pipeline's pieces (assist/completion.h) --------------------------

TEST_CASE("completion post-processing") {
  CompletionContext ctx = make_context("x = foo(\n", 8, 1000, 1000);
  CHECK(!ctx.single_line);
  CHECK(postprocess("a, b)\n\n\n", ctx) == "a, b)");
  ctx = make_context("x = foo()\n", 8, 1000, 1000);  // cursor between ( and )
  CHECK(ctx.single_line);
  CHECK(postprocess("a, b)\nmore", ctx) == "a, b");  // the ) already follows the cursor
  ctx = make_context("def f():\n    \n    return 1\n", 13, 1000, 1000);
  CHECK(postprocess("x = 2\n    return 1\n", ctx) == "x = 2");  // stops where it repeats the next line
  CHECK(postprocess("    x = 2", ctx) == "x = 2");              // no doubled indentation
  // the prefix window starts at a stable line (a multiple of 32) while typing
  std::string big;
  for (int i = 0; i < 200; ++i) big += "line " + std::to_string(i) + " of some code\n";
  const auto a = make_context(big, big.size() - 10, 2000, 100), b = make_context(big, big.size() - 5, 2000, 100);
  CHECK(a.prefix.substr(0, 40) == b.prefix.substr(0, 40));
  CHECK(a.prefix.size() <= 2000);
}

TEST_CASE("a completion reads an excerpt of a large document, and its context is the whole document's") {
  std::mt19937 rng(7);
  std::string doc;
  for (int i = 0; i < 3000; ++i) {
    const size_t len = rng() % 5 == 0 ? 0 : rng() % 120;
    doc += std::string(rng() % 200 == 0 ? 9000 : len, char('a' + i % 26));  // now and then one huge line
    doc += rng() % 7 == 0 ? "\r\n" : "\n";
  }
  for (int k = 0; k < 300; ++k) {
    const size_t cursor = k == 0 ? 0 : k == 1 ? doc.size() : rng() % (doc.size() + 1);
    for (const auto& [p, x] : {std::pair<size_t, size_t>{2000, 100}, {6000, 400}, {100, 5000}}) {
      const Excerpt e = excerpt_bounds(doc, cursor, p, x);
      REQUIRE(e.begin <= cursor);
      REQUIRE(cursor <= e.end);
      REQUIRE(e.end <= doc.size());
      const CompletionContext whole = make_context(doc, cursor, p, x);
      const CompletionContext part =
          make_context(std::string_view(doc).substr(e.begin, e.end - e.begin), cursor - e.begin, p, x, e.begin == 0);
      CHECK(part.prefix == whole.prefix);
      CHECK(part.suffix == whole.suffix);
      CHECK(part.single_line == whole.single_line);
      CHECK(part.prefix_whole == whole.prefix_whole);
    }
  }
  // The service's own budgets: kilobytes of a 20 MB document, not the document.
  std::string huge;
  while (huge.size() < (20u << 20)) huge += "    value = compute(value, " + std::to_string(huge.size()) + ")\n";
  const CompletionQuery q = query_at(huge, huge.size() / 2);
  CHECK(q.text.size() < 16384);
  CHECK(q.text_offset + q.cursor == huge.size() / 2);
  CHECK(huge.compare(q.text_offset, q.text.size(), q.text) == 0);
}

TEST_CASE("degenerate suggestions are cut back to their last sensible line or dropped") {
  const CompletionContext body = make_context("def area(width, height):\n    ", 29, 1000, 1000);
  REQUIRE(!body.single_line);
  std::string lens = "self.assertEqual(";
  for (int i = 0; i < 29; ++i) lens += "len(";
  CHECK(postprocess(lens, body).empty());  // what a real VS Code showed: 29 unclosed len(
  CHECK(postprocess("area = width * height\nprint(" + lens, body) == "area = width * height");
  // the same line again and again: the first copy stays
  CHECK(postprocess("return width * height\nreturn width * height\nreturn width * height\nreturn width", body) ==
        "return width * height");
  // a long line written twice (what the default model did in a real VS Code)
  CHECK(postprocess("x = 1\n    the file, and return the file, or None,\n    the file, and return the file, or None,",
                    body) == "x = 1\n    the file, and return the file, or None,");
  CHECK(postprocess("i += 1\n    i += 1", body) == "i += 1\n    i += 1");  // short lines may repeat
  // a block of two lines written three times
  CHECK(postprocess("a = 1\n    b = 2\n    a = 1\n    b = 2\n    a = 1\n    b = 2\n", body) == "a = 1\n    b = 2");
  // alternating tokens
  CHECK(postprocess("foo bar foo bar foo bar foo bar foo bar", body).empty());
  CHECK(postprocess("x = 1\ny = foo bar foo bar foo bar foo bar foo bar", body) == "x = 1");
  // runaway openers on one line
  CHECK(postprocess("x = f(g(h(i(j", body).empty());
  // closers: as many as the text before the cursor opened, no more
  const CompletionContext call = make_context("print(foo(x", 11, 1000, 1000);
  CHECK(postprocess("))))))", call) == "))");
  CHECK(postprocess("))))))))\nmore", body).empty());
  // nothing but whitespace or punctuation
  CHECK(postprocess("   \n\t\n  ", body).empty());
  CHECK(postprocess("?? !! @@ ^^ &&", body).empty());
  CHECK(postprocess("... ;; ,, :", body) == "... ;; ,, :");  // rulers, separators: not noise
  // sensible code survives
  CHECK(postprocess("# " + std::string(60, '-'), body) == "# " + std::string(60, '-'));
  CHECK(postprocess("x = [0, 0, 0, 0]", body) == "x = [0, 0, 0, 0]");
  CHECK(postprocess("return area(f(g(x)))", body) == "return area(f(g(x)))");
  CHECK(postprocess("if x:\n        y = 1\n    return y", body) == "if x:\n        y = 1\n    return y");
  CHECK(postprocess("| --- | --- | --- | --- |", body) == "| --- | --- | --- | --- |");
  const CompletionContext after_open = make_context("print(", 6, 100, 100);
  CHECK(postprocess("x)", after_open) == "x)");
  CHECK(postprocess(")", make_context("f(a, b", 6, 100, 100)) == ")");

  // the first copy of a looping line starts at the cursor, after indentation
  CHECK(postprocess("self.check(x)\n        self.check(x)\n        self.check(x)\n", body) == "self.check(x)");
  // a short unit repeated: `_to` five times
  CHECK(postprocess("x = _format_from_to_to_to_to_to", body).empty());
  // a table of numbers may run on for a while, not forever
  CHECK(postprocess("x = [0, 0, 0, 0, 0, 0, 0]", body) == "x = [0, 0, 0, 0, 0, 0, 0]");
  CHECK(postprocess("x = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0", body).empty());

  // ordinary code that looks like the rules' targets
  const std::string js = "a(function () {\n  b(function () {\n    c();\n";
  CHECK(postprocess("  });\n});", make_context(js, js.size(), 1000, 1000)) == "  });\n});");  // closers at three depths
  const std::string nested = "if (a) {\n  if (b) {\n    if (c) {\n      f();\n";
  CHECK(postprocess("    }\n  }\n}", make_context(nested, nested.size(), 1000, 1000)) == "    }\n  }\n}");
  CHECK(postprocess("const int MOD = 1000000007;", body) == "const int MOD = 1000000007;");
  CHECK(postprocess("mask = 0xFFFFFFFF", body) == "mask = 0xFFFFFFFF");
  const std::string rust = "fn greet(name: &'static str) {\n    println!(\"hi\");\n";
  CHECK(postprocess("}", make_context(rust, rust.size(), 1000, 1000)) == "}");
  std::string cpp = "namespace foo {\n";
  for (int i = 0; i < 40; ++i) cpp += "int x" + std::to_string(i) + ";\n";
  const CompletionContext cut = make_context(cpp, cpp.size(), 100, 100);
  REQUIRE(!cut.prefix_whole);  // the opener is above the window: the closer stays
  CHECK(postprocess("}  // namespace foo", cut) == "}  // namespace foo");

  // During generation only settled lines are judged, but a loop is a loop
  // however its line goes on: decoding can stop inside it.
  CHECK(degenerate_at("x = 1\nlen(len(len(len(len(", true) == 6);
  CHECK(degenerate_at("x = f(g(h(i(", true) == std::string::npos);  // may still close
  CHECK(degenerate_at("x = f(g(h(i(", false) == 0);
  CHECK(degenerate_at("y\ny\ny", true) == std::string::npos);  // the third y may go on
  CHECK(degenerate_at("y\ny\ny\n", true) == 2);
  CHECK(degenerate_at("return x\n", true) == std::string::npos);
}

TEST_CASE("a suggestion that starts the cursor's line over continues it instead") {
  const CompletionContext ret = make_context("def f(x):\n    return ", 21, 1000, 1000);
  CHECK(postprocess("    return 0", ret) == "0");
  CHECK(postprocess("return x + 1", ret) == "x + 1");
  CHECK(postprocess("x + 1", ret) == "x + 1");
  const CompletionContext call = make_context("def f(items):\n    return len(", 29, 1000, 1000);
  CHECK(postprocess("    return len(items)", call) == "items)");
  // continuations that begin like the text before the cursor
  CHECK(postprocess("_init__(self):", make_context("class A:\n    def _", 19, 1000, 1000)) == "_init__(self):");
  CHECK(postprocess("/ TODO", make_context("x = 1\n/", 7, 1000, 1000)) == "/ TODO");
  CHECK(postprocess("      4096", make_context("#define BUF_SIZE", 16, 1000, 1000)) == "      4096");
  // a new line's content without the new line: nothing sensible to insert here
  const CompletionContext header = make_context("def f(x):", 9, 1000, 1000);
  CHECK(postprocess("    return x", header).empty());
  CHECK(postprocess("  # the identity", header) == "  # the identity");  // an inline comment keeps its spaces
}

TEST_CASE("token healing: a prefix ending in a word leaves its last token out, for the answer to begin with") {
  const auto file = moelsp::gguf::File::open(moelsp::test::data_path("reference/deepseek2-lite-ref.gguf"));
  const auto tok = moelsp::Tokenizer::from_gguf(file);
  const CompletionContext word{"def f(self):\n    return self.valu", "\n", false, true, {}};
  std::string heal = "stale";
  const auto healed = fim_prompt(*tok, word, 0, FimOrder::kSpm, &heal);
  const auto plain = fim_prompt(*tok, word, 0, FimOrder::kSpm);
  REQUIRE(!heal.empty());
  CHECK(word.prefix.compare(word.prefix.size() - heal.size(), heal.size(), heal) == 0);
  REQUIRE(healed.size() + 1 == plain.size());
  CHECK(std::equal(healed.begin(), healed.end(), plain.begin()));  // the same prompt without its last token
  CHECK(tok->piece(plain.back()) == heal);
  // Not after punctuation, blanks or a bracket: nothing is healed, nothing left out.
  for (const char* p : {"x = foo(", "return ", "a.", "    "}) {
    const CompletionContext c{p, "\n", false, true, {}};
    CHECK(fim_prompt(*tok, c, 0, FimOrder::kPsm, &heal) == fim_prompt(*tok, c, 0, FimOrder::kPsm));
    CHECK(heal.empty());
  }
}

TEST_CASE("a cursor after code on its line gets the rest of that line, unless the line opens a block") {
  const std::string src = "class T:\n    def f(self, event):\n        return se\n        x = 1\n";
  const size_t cursor = src.find("return se") + 9;
  const CompletionContext mid = make_context(src, cursor, 1000, 1000);
  REQUIRE_FALSE(mid.single_line);                               // nothing after the cursor on its line
  CHECK(line_end_at("lf.dispatch", mid) == std::string::npos);  // the line is not finished yet
  CHECK(line_end_at("lf.dispatch\n        else:", mid) == 11);
  CHECK(postprocess("lf.dispatch\n        else:\n            pass", mid) == "lf.dispatch");
  CHECK(postprocess("\n        y = 2", mid).empty());    // a new line cannot start mid-line
  CHECK(postprocess("  \n        y = 2", mid).empty());  // nor after blanks
  CHECK(postprocess("lf.x  \r\n    y", mid) == "lf.x");  // trailing blanks go too
  // A first line that opens something: its body belongs to the suggestion.
  const std::string def = "def fib(n";
  const CompletionContext sig = make_context(def, def.size(), 1000, 1000);
  for (const char* opener : {"):", ") {", ", (", ", [", ",", " \\"}) {
    const std::string raw = std::string(opener) + "\n    return n";
    INFO(raw);
    CHECK(line_end_at(raw, sig) == std::string::npos);
    CHECK(postprocess(raw, sig) == raw);
  }
  // A cursor at a line's start or after its indentation: multi-line as before.
  const CompletionContext body = make_context("def f():\n    ", 13, 1000, 1000);
  CHECK(line_end_at("x = 1\n    return x", body) == std::string::npos);
  CHECK(postprocess("x = 1\n    return x", body) == "x = 1\n    return x");
}

TEST_CASE("post-processing never lengthens or reorders a suggestion (property)") {
  const std::vector<std::string> pieces = {"len(", ")",  "]",  "}",  "(",    "[",       "{",     "x",     "foo",
                                           " ",    "  ", "\t", "\n", "    ", "return ", "=",     "0, ",   ":",
                                           "#",    "-",  ".",  "\"", "'",    "\r\n",    "def f", "width", ";"};
  const std::vector<std::pair<std::string, size_t>> docs = {{"def area(width, height):\n    \n    return 1\n", 29},
                                                            {"x = foo()\n", 8},
                                                            {"print(foo(x", 11},
                                                            {"", 0},
                                                            {"  ", 2},
                                                            {"a = [\n", 6},
                                                            {"if (x) {\n  \n}\n", 11}};
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 20000; ++iter) {
    std::string raw;
    const int n = int(rng() % 40);
    for (int i = 0; i < n; ++i) raw += pieces[rng() % pieces.size()];
    const auto& [doc, cursor] = docs[rng() % docs.size()];
    const CompletionContext ctx = make_context(doc, cursor, 1000, 1000);
    const std::string out = postprocess(raw, ctx);
    // `out` is raw with some leading whitespace dropped and a tail cut.
    const size_t lead = raw.find_first_not_of(" \t");
    bool ok = out.empty() || raw.compare(0, out.size(), out) == 0;
    if (!ok && lead != std::string::npos) ok = raw.compare(lead, out.size(), out) == 0;
    INFO("raw: " << nlohmann::json(raw).dump() << " out: " << nlohmann::json(out).dump());
    REQUIRE(ok);
    REQUIRE(out.size() <= raw.size());
    // and what is left is not itself degenerate
    REQUIRE(degenerate_at(out) == std::string::npos);
  }
}

TEST_CASE("FIM prompt fits the token budget, keeping the text nearest the cursor") {
  const auto file = moelsp::gguf::File::open(moelsp::test::data_path("reference/deepseek2-lite-ref.gguf"));
  const auto tok = moelsp::Tokenizer::from_gguf(file);
  const auto& sp = tok->special();
  std::string prefix, suffix;
  for (int i = 0; i < 300; ++i) prefix += "value_" + std::to_string(i) + " = compute(" + std::to_string(i) + ")\n";
  for (int i = 0; i < 100; ++i) suffix += "after_" + std::to_string(i) + " = 1\n";
  const CompletionContext ctx{prefix + "result = ", suffix, false, true, {}};
  const auto full = fim_prompt(*tok, ctx);
  REQUIRE(full.size() > 1000);
  for (size_t budget : {64, 200, 500}) {
    const auto p = fim_prompt(*tok, ctx, budget);
    // Both sides are longer than their share: the budget is used, less what the prefix's cut in steps leaves.
    CHECK(p.size() <= budget);
    CHECK(p.size() + kPrefixCutStep > budget);
    const auto suf = std::find(p.begin(), p.end(), sp.fim_suf);
    const auto mid = std::find(p.begin(), p.end(), sp.fim_mid);
    REQUIRE(suf != p.end());
    REQUIRE(mid == p.end() - 1);
    CHECK(size_t(mid - suf - 1) <= budget / 4);  // the suffix keeps at most a quarter
    // The prefix keeps its end: the tokens just before the cursor are those of the full prompt.
    const auto full_suf = std::find(full.begin(), full.end(), sp.fim_suf);
    CHECK(std::equal(suf - 10, suf, full_suf - 10));
    // The suffix keeps its start.
    CHECK(std::equal(suf + 1, suf + 6, full_suf + 1));
  }
  // Short text: nothing is cut, whatever the budget.
  const CompletionContext small{"x = ", "\n", false, true, {}};
  CHECK(fim_prompt(*tok, small, 64) == fim_prompt(*tok, small));

  // SPM: the same fitted parts, the suffix first and the prefix last, so the
  // answer continues the prefix. This model's file declares no order: PSM.
  CHECK_FALSE(sp.fim_spm);
  CHECK(fim_prompt(*tok, ctx, 200, FimOrder::kModel) == fim_prompt(*tok, ctx, 200, FimOrder::kPsm));
  for (size_t budget : {0, 64, 200}) {
    const auto psm = fim_prompt(*tok, ctx, budget, FimOrder::kPsm);
    const auto spm = fim_prompt(*tok, ctx, budget, FimOrder::kSpm);
    REQUIRE(spm.size() == psm.size());
    const auto psm_pre = std::find(psm.begin(), psm.end(), sp.fim_pre);  // after BOS, if the model adds one
    const auto psm_suf = std::find(psm.begin(), psm.end(), sp.fim_suf);
    const std::vector<TokenId> pre(psm_pre + 1, psm_suf), suf(psm_suf + 1, psm.end() - 1);
    std::vector<TokenId> want(psm.begin(), psm_pre);
    want.insert(want.end(), {sp.fim_pre, sp.fim_suf});
    want.insert(want.end(), suf.begin(), suf.end());
    want.push_back(sp.fim_mid);
    want.insert(want.end(), pre.begin(), pre.end());
    CHECK(spm == want);
  }
}

TEST_CASE("FIM prompt: typing at the end of a long prefix keeps the prompt's start") {
  const auto file = moelsp::gguf::File::open(moelsp::test::data_path("reference/deepseek2-lite-ref.gguf"));
  const auto tok = moelsp::Tokenizer::from_gguf(file);
  std::string prefix;
  for (int i = 0; i < 300; ++i) prefix += "value_" + std::to_string(i) + " = compute(" + std::to_string(i) + ")\n";
  // 16 keystrokes of ~3 tokens each: the cut moves at most twice (a step is 32 tokens), never on every keystroke.
  std::vector<TokenId> last;
  int moved = 0;
  for (int k = 0; k < 16; ++k) {
    prefix += "y = ";
    const auto p = fim_prompt(*tok, {prefix, "", false, true, {}}, 200, FimOrder::kSpm);
    REQUIRE(p.size() <= 200);
    // (The new prompt may be shorter, by up to a step: compare only where it reaches.)
    const size_t kept = last.size() > 4 ? last.size() - 4 : 0;
    if (!last.empty() && (p.size() < kept || !std::equal(last.begin(), last.begin() + long(kept), p.begin()))) ++moved;
    last = p;
  }
  CHECK(moved <= 2);
}

TEST_CASE("a multi-line suggestion ends where the cursor's block ends") {
  // Inside a function: the next definition (less indented) is not part of it.
  const std::string fn = "def area(w, h):\n    return ";
  const CompletionContext body = make_context(fn, fn.size(), 1000, 1000);
  CHECK(postprocess("w * h\n\ndef other():\n    pass", body) == "w * h");
  CHECK(block_end_at("w * h\n\nd", body) == 6);                 // decoding can stop as soon as the line shows
  CHECK(block_end_at("w * h\n\n", body) == std::string::npos);  // blank lines say nothing yet
  CHECK(block_end_at("w * h\n    + 1", body) == std::string::npos);
  // A method: the next method (indented less than the body) ends it.
  const std::string cls = "class A:\n    def f(self):\n        ";
  const CompletionContext method = make_context(cls, cls.size(), 1000, 1000);
  CHECK(postprocess("x = 1\n        return x\n\n    def g(self):\n        return 2", method) ==
        "x = 1\n        return x");
  // Braces: the block's closer is less indented than its statements.
  const std::string c = "int f(void) {\n    ";
  CHECK(postprocess("int x = 1;\n    return x;\n}\n\nint g(void) {", make_context(c, c.size(), 1000, 1000)) ==
        "int x = 1;\n    return x;");
  // Tabs count as they are written.
  const std::string tabs = "def f():\n\t";
  CHECK(postprocess("x = 1\n\ty = 2\nz = 3", make_context(tabs, tabs.size(), 1000, 1000)) == "x = 1\n\ty = 2");
  // At the top level nothing is less indented: a new definition after the first line ends it.
  const CompletionContext top = make_context("import os\n\n", 11, 1000, 1000);
  CHECK(postprocess("def read(p):\n    return open(p).read()\n\n\ndef write(p):\n    pass", top) ==
        "def read(p):\n    return open(p).read()");
  CHECK(postprocess("@dataclass\nclass P:\n    x: int\n\n@dataclass\nclass Q:", top) ==
        "@dataclass\nclass P:\n    x: int");
  CHECK(postprocess("x = 1\ny = 2", top) == "x = 1\ny = 2");  // statements, not definitions
  // A signature finished by the suggestion: its body stays, the next definition goes.
  const std::string sig = "def fib(n";
  CHECK(postprocess("):\n    return n\n\ndef next():", make_context(sig, sig.size(), 1000, 1000)) ==
        "):\n    return n");
}
