// Typing simulation against the LSP server: a source file is typed key by key
// (didChange + inlineCompletion every --interval-ms), as an editor with
// inline suggestions does. Reports latency to the answer (p50/p95), the
// fraction of requests cancelled by the next keystroke, how many answers had a
// suggestion, and cache hits, and what prompt lookup drafts (--draft,
// completion.draftTokens) saved. The server runs in-process over pipes, the
// same code as `moelsp lsp`.
//
//   moelsp_bench_lsp_typing [--model FILE] [--file SRC] [--keys N] [--interval-ms MS] [--chats N] [--draft N]
//                           [--minutes M] [--report-s S] [--svg FILE]
//   moelsp_bench_lsp_typing --at-end N [--open-lines L] [--keep-rest] [--model FILE] [--file SRC] [--max-tokens T]
//                           [--fim-order psm|spm] [--workspace DIR [--context-tokens N]]
//
// --workspace DIR opens DIR as the workspace folder (the server's workspace
// index walks it before typing starts, and --file is edited under its own
// path, so its buffer joins the index) and --context-tokens sets
// completion.contextTokens (default 1024; 0: context off): typing with and
// without other files' code ahead of each prompt.
//
// --at-end N is the edit-at-the-end pattern: the first L lines of SRC (all of
// it by default) are opened and a suggestion asked for at the end (the first
// suggestion: the whole file is prefilled), then the file's next N
// characters are typed there one at a time, each waiting for its answer
// (no cancellation). Reports the first latency, the later ones' p50/p95,
// and where the later ones' time went: queueing, the prompt's new tokens,
// decoding, and the rest (moelsp/status's completions.breakdown). With
// --keep-rest the rest of the file stays after the cursor (the N typed
// characters are cut out of it and typed back): editing inside a file, where
// the text after the cursor is the FIM suffix — which the FIM prompt's order
// (--fim-order, completion.fimOrder) decides whether a keystroke re-prefills.
//
// With --chats N, N chat requests run the whole time (each one that ends is
// sent again): completions must not wait behind them. --minutes M types
// for M minutes (a soak) and --report-s S prints, every S seconds, the
// process's RSS and thread count and the latency percentiles of that window
// (the server runs in this process), so growth over time shows; --svg FILE
// draws those reports (RSS, threads, latency p50/p95 over time).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "lsp_client.h"
#include "svg_plot.h"

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using moelsp::test::Client;

namespace {

struct Options {
  std::string model = std::string(MOELSP_SOURCE_DIR) + "/tests/data/reference/qwen3moe-ref.gguf";
  std::string file = std::string(MOELSP_SOURCE_DIR) + "/engine/arch/deepseek2.cpp";
  int keys = 300, interval_ms = 80, max_tokens = 16, threads = 0, chats = 0, draft = 8, at_end = 0, open_lines = 0;
  double minutes = 0, report_s = 0;
  std::string svg, fim_order, workspace;
  int context_tokens = 1024;
  bool keep_rest = false;
};

// The answers so far, filled on the client's reader thread.
struct Tally {
  std::mutex mu;
  std::vector<double> latency;  // ms, of the answered requests, in order
  int cancelled = 0, with_items = 0, answered = 0, errors = 0, chats_done = 0;
  bool typing = true;  // chats that end are sent again while true
  size_t settled() const { return latency.size() + size_t(cancelled + errors); }
};

// An editor's messages: `text` typed at (line, col), and a suggestion asked for there.
json typed_at(const std::string& uri, int version, int line, int col, const std::string& text) {
  const json at = {{"line", line}, {"character", col}};
  return {{"textDocument", {{"uri", uri}, {"version", version}}},
          {"contentChanges", {{{"range", {{"start", at}, {"end", at}}}, {"text", text}}}}};
}
json suggestion_at(const std::string& uri, int line, int col) {
  return {{"textDocument", {{"uri", uri}}},
          {"position", {{"line", line}, {"character", col}}},
          {"context", {{"triggerKind", 2}}}};
}

// The server in this process and an editor's side of the conversation.
class Session {
 public:
  explicit Session(const Options& o) : o_(o) {}

  // initialize with the bench's settings; waits (up to 30 s) for the model.
  void start() {
    c_.on_message([this](const json& m) {
      if (m.value("method", "") == "moelsp/status" && m["params"]["state"] == "ready") ready_ = true;
    });
    json completion = {{"maxTokens", o_.max_tokens},
                       {"timeBudgetMs", 1000},
                       {"draftTokens", o_.draft},
                       {"contextTokens", o_.context_tokens}};
    if (!o_.fim_order.empty()) completion["fimOrder"] = o_.fim_order;
    c_.call("initialize", {{"capabilities", {{"textDocument", {{"inlineCompletion", json::object()}}}}},
                           {"rootUri", o_.workspace.empty() ? json() : json("file://" + o_.workspace)},
                           {"initializationOptions",
                            {{"model", o_.model},
                             {"threads", o_.threads},
                             {"contextSize", 4096},
                             {"completion", completion},
                             {"chat", {{"maxTokens", 2000}, {"template", "chatml"}}}}}});
    c_.notify("initialized");
    for (int i = 0; i < 600 && !ready_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  json status() { return c_.call("moelsp/status")["result"]; }
  void open(const std::string& uri, const std::string& language, const std::string& text) {
    c_.notify("textDocument/didOpen",
              {{"textDocument", {{"uri", uri}, {"languageId", language}, {"version", 1}, {"text", text}}}});
  }
  void type(const std::string& uri, int version, int line, int col, const std::string& text) {
    c_.notify("textDocument/didChange", typed_at(uri, version, line, col, text));
  }
  // Asks for a suggestion at (line, col); its answer lands in the tally.
  void ask(const std::string& uri, int line, int col) {
    const auto sent = Clock::now();
    c_.call("textDocument/inlineCompletion", suggestion_at(uri, line, col), [this, sent](const json& j) {
      std::lock_guard lock(t_.mu);
      ++t_.answered;
      if (j.contains("error")) {
        if (j["error"]["code"] == -32800) ++t_.cancelled;
        else ++t_.errors;
        return;
      }
      t_.latency.push_back(std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
      if (!j["result"]["items"].empty()) ++t_.with_items;
    });
  }
  // Asks and waits for the answer (up to a minute).
  void ask_and_wait(const std::string& uri, int line, int col) {
    size_t before;
    {
      std::lock_guard lock(t_.mu);
      before = t_.settled();
    }
    ask(uri, line, col);
    for (int i = 0; i < 6000; ++i) {
      {
        std::lock_guard lock(t_.mu);
        if (t_.settled() > before) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  // A long chat; sent again when it ends while typing goes on.
  void start_chat(int n) {
    const json id =
        c_.call("moelsp/chat",
                {{"messages", {{{"role", "user"}, {"content", "Tell a long story, number " + std::to_string(n)}}}}},
                [this, n](const json& j) {
                  bool again;
                  {
                    std::lock_guard lock(t_.mu);
                    ++t_.chats_done;
                    again = t_.typing;
                    chats_running_.erase(j["id"].dump());
                  }
                  if (again) start_chat(n);
                });
    std::lock_guard lock(t_.mu);
    chats_running_.insert(id.dump());  // (one that already ended stays: cancelling it does nothing)
  }
  void stop_typing() {
    std::set<std::string> running;
    {
      std::lock_guard lock(t_.mu);
      t_.typing = false;
      running = chats_running_;
    }
    for (const std::string& id : running) c_.notify("$/cancelRequest", {{"id", json::parse(id)}});
  }
  void shutdown() {
    c_.call("shutdown");
    c_.notify("exit");
    c_.exit_code();
  }
  Tally& tally() { return t_; }

 private:
  const Options& o_;
  Tally t_;
  std::set<std::string> chats_running_;  // ids (dumped), guarded by t_.mu
  std::atomic<bool> ready_{false};
  Client c_;  // last: destroyed first, so no callback outlives what it writes to
};

double percentile(const std::vector<double>& sorted, double p) {
  return sorted.empty() ? 0.0 : sorted[std::min(sorted.size() - 1, size_t(p * double(sorted.size())))];
}

// Where the later suggestions' time went, from moelsp/status's
// completions.breakdown before (after the first) and after.
void print_breakdown(const json& first, const json& last) {
  const json b0 = first["completions"]["breakdown"], b1 = last["completions"]["breakdown"];
  const double n = double(std::max<int64_t>(1, b1.value("answers", int64_t(0)) - b0.value("answers", int64_t(0))));
  const auto per = [&](const char* k) { return (b1.value(k, 0.0) - b0.value(k, 0.0)) / n; };
  const auto per_i = [&](const char* k) { return double(b1.value(k, int64_t(0)) - b0.value(k, int64_t(0))) / n; };
  const double other = per("totalMs") - per("queueMs") - per("promptMs") - per("generateMs") - per("contextMs");
  fmt::print(
      "later suggestions, mean per answer: total {:.1f} ms = queue {:.1f} + context {:.1f} (other files' code) + "
      "prompt {:.1f} ({:.1f} new tokens) + decode {:.1f} ({:.1f} tokens) + other {:.1f} (tokenize, debounce, "
      "post-processing)\n",
      per("totalMs"), per("queueMs"), per("contextMs"), per("promptMs"), per_i("promptTokensNew"), per("generateMs"),
      per_i("generatedTokens"), other);
}

// The edit-at-the-end pattern (--at-end): the document opened, a first
// suggestion (the whole file prefilled), then one character typed at a time,
// each waiting for its answer.
int run_at_end(Session& s, const Options& o, const std::string& src) {
  // The opened part: the first open_lines lines; typed: what follows them.
  size_t open_end = src.size();
  if (o.open_lines > 0)
    for (size_t at = 0, line_no = 0; at < src.size(); ++at)
      if (src[at] == '\n' && ++line_no == size_t(o.open_lines)) {
        open_end = at + 1;
        break;
      }
  const std::string doc = src.substr(0, open_end);
  std::string typed = src.substr(open_end);
  while (typed.size() < size_t(o.at_end)) typed += "x = 1\n";  // past the end of the file: more code
  const std::string rest = o.keep_rest ? typed.substr(size_t(o.at_end)) : std::string();
  typed.resize(size_t(o.at_end));
  const std::string uri = !o.workspace.empty()
                              ? "file://" + std::filesystem::canonical(o.file).string()
                              : "file:///bench/edited" + std::filesystem::path(o.file).extension().string();
  s.open(uri, "code", doc + rest);
  int line = int(std::count(doc.begin(), doc.end(), '\n'));
  int col = int(doc.size() - (doc.rfind('\n') == std::string::npos ? 0 : doc.rfind('\n') + 1));
  if (!o.workspace.empty())  // the walk first: typing measures queries, not the walk competing for the cores
    for (int i = 0; i < 6000 && s.status()["index"].value("state", "") != "ready"; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  s.ask_and_wait(uri, line, col);
  const json first = s.status();
  // Which answers the model ran (the status's cache hits, read between
  // keystrokes, outside the timed answers): a suggestion typed through
  // costs about nothing, so the p50 over all answers can hide the model's.
  const auto cache_hits = [&] { return s.status()["completions"].value("cacheHits", int64_t(0)); };
  int64_t hits = first["completions"].value("cacheHits", int64_t(0));
  std::vector<bool> from_model;
  for (int k = 0; k < o.at_end; ++k) {
    const std::string key = typed.substr(size_t(k), 1);
    s.type(uri, k + 2, line, col, key);
    if (key == "\n") ++line, col = 0;
    else ++col;
    s.ask_and_wait(uri, line, col);
    const int64_t now = cache_hits();
    from_model.push_back(now == hits);
    hits = now;
  }
  const json last = s.status();
  s.shutdown();
  const Tally& t = s.tally();
  std::string in_order;
  for (double ms : t.latency) in_order += fmt::format(" {:.0f}", ms);
  std::vector<double> later(t.latency.begin() + (t.latency.empty() ? 0 : 1), t.latency.end());
  std::vector<double> later_model;
  for (size_t i = 0; i < later.size() && i < from_model.size(); ++i)
    if (from_model[i]) later_model.push_back(later[i]);
  std::sort(later.begin(), later.end());
  std::sort(later_model.begin(), later_model.end());
  fmt::print(
      "{}: {} ({} lines, {} bytes before the cursor, {} after), model {}, {}-token suggestions, {} edits, "
      "FIM order {}\n",
      o.keep_rest ? "edit-inside-the-file" : "edit-at-the-end", o.file, std::count(doc.begin(), doc.end(), '\n'),
      doc.size(), rest.size(), o.model, o.max_tokens, o.at_end, o.fim_order.empty() ? "the model's" : o.fim_order);
  const json b0 = first["completions"]["breakdown"];
  fmt::print("first suggestion: {:.0f} ms ({} prompt tokens prefilled in {:.0f} ms, {} generated in {:.0f} ms)\n",
             t.latency.empty() ? 0.0 : t.latency.front(), b0.value("promptTokensNew", int64_t(0)),
             b0.value("promptMs", 0.0), b0.value("generatedTokens", int64_t(0)), b0.value("generateMs", 0.0));
  fmt::print(
      "later suggestions: p50 {:.0f} ms, p95 {:.0f} ms over {} answers ({} errors, {} from the suggestion cache)\n",
      percentile(later, 0.5), percentile(later, 0.95), later.size(), t.errors,
      last["completions"].value("cacheHits", int64_t(0)) - first["completions"].value("cacheHits", int64_t(0)));
  fmt::print("later suggestions the model ran: p50 {:.0f} ms, p95 {:.0f} ms over {} answers\n",
             percentile(later_model, 0.5), percentile(later_model, 0.95), later_model.size());
  fmt::print("latencies in order (ms):{}\n", in_order);
  if (!o.workspace.empty()) {
    const json& ix = last["index"];
    fmt::print("workspace {}: {} files, {} chunks indexed in {:.0f} ms; completion.contextTokens {}\n", o.workspace,
               ix.value("files", 0), ix.value("chunks", 0), ix.value("buildMs", 0.0), o.context_tokens);
  }
  print_breakdown(first, last);
  return 0;
}

// --report-s: RSS, threads and the window's latency percentiles over time.
struct Reports {
  std::vector<double> t, rss, threads, p50, p95;
  size_t reported = 0;  // latencies already counted in a window

  void add(Tally& tally, double seconds, int keys) {
    std::vector<double> window;
    {
      std::lock_guard lock(tally.mu);
      window.assign(tally.latency.begin() + long(reported), tally.latency.end());
      reported = tally.latency.size();
    }
    std::sort(window.begin(), window.end());
    const auto [nthreads, rss_kib] = moelsp::test::proc_status();
    const double rss_mib = double(rss_kib) / 1024;
    fmt::print("t={:.0f}s keys={} rss={:.1f} MiB threads={} latency p50 {:.1f} p95 {:.1f} ms ({} answers)\n", seconds,
               keys, rss_mib, nthreads, percentile(window, 0.5), percentile(window, 0.95), window.size());
    std::fflush(stdout);
    t.push_back(seconds);
    rss.push_back(rss_mib);
    threads.push_back(nthreads);
    p50.push_back(percentile(window, 0.5));
    p95.push_back(percentile(window, 0.95));
  }
  void write_svg(const Options& o) const {
    using moelsp::bench::PlotPanel;
    const std::string title =
        fmt::format("typing {} keys/s with {} chats running ({} model)", 1000 / std::max(1, o.interval_ms), o.chats,
                    std::filesystem::path(o.model).filename().string());
    const std::vector<PlotPanel> panels{
        {"RSS (MiB)", {{"RSS", "#1f77b4", rss}}},
        {"threads", {{"threads", "#7f7f7f", threads}}},
        {"latency (ms)", {{"p50", "#2ca02c", p50}, {"p95", "#d62728", p95}}},
    };
    std::ofstream(o.svg) << moelsp::bench::line_chart_svg(title, t, "seconds", panels);
    fmt::print("wrote {}\n", o.svg);
  }
};

void print_typing(const Options& o, Tally& t, int n, const json& final_status) {
  std::sort(t.latency.begin(), t.latency.end());
  fmt::print(
      "typing simulation: {} keystrokes every {} ms into {} (model {}), {} chats running ({} chat answers ended "
      "meanwhile)\n",
      n, o.interval_ms, o.file, o.model, o.chats, t.chats_done);
  fmt::print(
      "answered {} of {} requests: {} with a suggestion, {} cancelled by a newer keystroke ({:.1f}%), {} errors\n",
      t.answered, n, t.with_items, t.cancelled, 100.0 * t.cancelled / std::max(1, n), t.errors);
  fmt::print("latency to the answer (ms), answered requests: p50 {:.1f}, p95 {:.1f}, max {:.1f}\n",
             percentile(t.latency, 0.5), percentile(t.latency, 0.95), t.latency.empty() ? 0.0 : t.latency.back());
  if (final_status.contains("scheduler")) {
    const json& sc = final_status["scheduler"];
    const int64_t steps = sc.value("steps", int64_t(0)), dsteps = sc.value("draftSteps", int64_t(0)),
                  dtok = sc.value("draftTokens", int64_t(0)), dacc = sc.value("draftAccepted", int64_t(0));
    fmt::print(
        "engine: {} forward passes; prompt lookup (--draft {}): {} steps carried {} draft tokens, {} confirmed "
        "({:.2f} extra tokens per drafted step, {:.0f}% of drafts)\n",
        steps, o.draft, dsteps, dtok, dacc, dsteps ? double(dacc) / double(dsteps) : 0.0,
        dtok ? 100.0 * double(dacc) / double(dtok) : 0.0);
  }
}

// The typing pattern: from the middle of the file, a key and a request every
// --interval-ms, whether or not the last one was answered.
int run_typing(Session& s, const Options& o, const std::string& src) {
  size_t cursor = src.size() / 2;
  cursor = src.rfind('\n', cursor) + 1;
  for (int k = 0; k < o.chats; ++k) s.start_chat(k);
  const std::string uri = "file:///bench/typed.cpp";
  while (cursor > 0 && cursor < src.size() && (static_cast<unsigned char>(src[cursor]) & 0xC0) == 0x80) --cursor;
  const std::string doc = src.substr(0, cursor);
  s.open(uri, "cpp", doc);
  int line = int(std::count(doc.begin(), doc.end(), '\n'));
  int col = 0;
  const auto t_start = Clock::now();
  auto next_report = t_start + std::chrono::duration<double>(o.report_s);
  Reports reports;
  int n = 0;
  for (; n < o.keys && cursor < src.size(); ++n) {
    if (o.report_s > 0 && Clock::now() >= next_report) {
      reports.add(s.tally(), std::chrono::duration<double>(Clock::now() - t_start).count(), n);
      next_report += std::chrono::duration<double>(o.report_s);
    }
    // One key is one character: a whole UTF-8 sequence (positions count UTF-16 units).
    const auto lead = static_cast<unsigned char>(src[cursor]);
    const size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    const std::string key = src.substr(cursor, len);
    cursor += key.size();
    s.type(uri, n + 2, line, col, key);
    if (key == "\n") ++line, col = 0;
    else col += len == 4 ? 2 : 1;
    s.ask(uri, line, col);
    std::this_thread::sleep_until(t_start + std::chrono::milliseconds(int64_t(o.interval_ms) * (n + 1)));
  }
  s.stop_typing();
  for (int i = 0; i < 200; ++i) {  // let the last answers arrive
    {
      std::lock_guard lock(s.tally().mu);
      if (s.tally().answered >= n) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const json final_status = s.status();
  s.shutdown();
  print_typing(o, s.tally(), n, final_status);
  if (!o.svg.empty()) reports.write_svg(o);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"LSP typing simulation"};
  Options o;
  app.add_option("--model", o.model, "GGUF model")->capture_default_str();
  app.add_option("--file", o.file, "Source file to type (its second half is typed)")->capture_default_str();
  app.add_option("--keys", o.keys, "Keystrokes to simulate")->capture_default_str();
  app.add_option("--interval-ms", o.interval_ms, "Milliseconds between keystrokes")->capture_default_str();
  app.add_option("--max-tokens", o.max_tokens, "completion.maxTokens")->capture_default_str();
  app.add_option("--draft", o.draft, "completion.draftTokens (prompt lookup drafts per step; 0: off)")
      ->capture_default_str();
  app.add_option("-t,--threads", o.threads, "Engine threads (0: physical cores)");
  app.add_option("--minutes", o.minutes, "Type for this long instead of --keys (a soak)");
  app.add_option("--report-s", o.report_s, "Print RSS, threads and latency every this many seconds");
  app.add_option("--svg", o.svg, "Write the --report-s reports as an SVG chart to this file");
  app.add_option("--chats", o.chats, "Chat requests kept running meanwhile")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--at-end", o.at_end,
                 "Edit-at-the-end pattern: type this many characters at the end, one answer each");
  app.add_option("--open-lines", o.open_lines, "--at-end: open this many lines of --file (0: all)");
  app.add_flag("--keep-rest", o.keep_rest,
               "--at-end: keep the rest of --file after the cursor (the typed characters cut out of it)");
  app.add_option("--fim-order", o.fim_order, "completion.fimOrder (default: the model's own)")
      ->check(CLI::IsMember({"psm", "spm"}));
  app.add_option("--workspace", o.workspace, "--at-end: the workspace folder (indexed before typing starts)");
  app.add_option("--context-tokens", o.context_tokens, "completion.contextTokens (0: no other files' code)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!o.workspace.empty()) o.workspace = std::filesystem::canonical(o.workspace).string();
  if (o.minutes > 0) o.keys = int(o.minutes * 60000 / o.interval_ms);
  if (!o.svg.empty() && o.report_s <= 0) {
    std::fprintf(stderr, "--svg needs --report-s (the reports are what it draws)\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  std::ifstream in(o.file);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string src = ss.str();
  if (src.empty()) {
    std::fprintf(stderr, "%s: empty or unreadable\n", o.file.c_str());
    return 1;
  }
  try {
    Session s(o);
    s.start();
    return o.at_end > 0 ? run_at_end(s, o, src) : run_typing(s, o, src);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp_bench_lsp_typing: %s\n", e.what());
    return 1;
  }
}
