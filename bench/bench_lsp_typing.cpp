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
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "lsp/server.h"
#include "lsp/transport.h"
#include "svg_plot.h"

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  CLI::App app{"LSP typing simulation"};
  std::string model = std::string(MOELSP_SOURCE_DIR) + "/tests/data/reference/qwen3moe-ref.gguf";
  std::string file = std::string(MOELSP_SOURCE_DIR) + "/engine/arch/deepseek2.cpp";
  int keys = 300, interval_ms = 80, max_tokens = 16, threads = 0, chats = 0, draft = 8, at_end = 0, open_lines = 0;
  double minutes = 0, report_s = 0;
  std::string svg, fim_order, workspace;
  int context_tokens = 1024;
  bool keep_rest = false;
  app.add_option("--model", model, "GGUF model")->capture_default_str();
  app.add_option("--file", file, "Source file to type (its second half is typed)")->capture_default_str();
  app.add_option("--keys", keys, "Keystrokes to simulate")->capture_default_str();
  app.add_option("--interval-ms", interval_ms, "Milliseconds between keystrokes")->capture_default_str();
  app.add_option("--max-tokens", max_tokens, "completion.maxTokens")->capture_default_str();
  app.add_option("--draft", draft, "completion.draftTokens (prompt lookup drafts per step; 0: off)")
      ->capture_default_str();
  app.add_option("-t,--threads", threads, "Engine threads (0: physical cores)");
  app.add_option("--minutes", minutes, "Type for this long instead of --keys (a soak)");
  app.add_option("--report-s", report_s, "Print RSS, threads and latency every this many seconds");
  app.add_option("--svg", svg, "Write the --report-s reports as an SVG chart to this file");
  app.add_option("--chats", chats, "Chat requests kept running meanwhile")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--at-end", at_end, "Edit-at-the-end pattern: type this many characters at the end, one answer each");
  app.add_option("--open-lines", open_lines, "--at-end: open this many lines of --file (0: all)");
  app.add_flag("--keep-rest", keep_rest,
               "--at-end: keep the rest of --file after the cursor (the typed characters cut out of it)");
  app.add_option("--fim-order", fim_order, "completion.fimOrder (default: the model's own)")
      ->check(CLI::IsMember({"psm", "spm"}));
  app.add_option("--workspace", workspace, "--at-end: the workspace folder (indexed before typing starts)");
  app.add_option("--context-tokens", context_tokens, "completion.contextTokens (0: no other files' code)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!workspace.empty()) workspace = std::filesystem::canonical(workspace).string();
  if (minutes > 0) keys = int(minutes * 60000 / interval_ms);
  if (!svg.empty() && report_s <= 0) {
    std::fprintf(stderr, "--svg needs --report-s (the reports are what it draws)\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);

  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string src = ss.str();
  if (src.empty()) {
    std::fprintf(stderr, "%s: empty or unreadable\n", file.c_str());
    return 1;
  }
  size_t cursor = src.size() / 2;
  cursor = src.rfind('\n', cursor) + 1;

  int to_server[2], from_server[2];
  if (pipe(to_server) || pipe(from_server)) return 1;
  moelsp::lsp::Transport st(to_server[0], from_server[1]), ct(from_server[0], to_server[1]);
  moelsp::lsp::Server server(st, {});
  std::thread srv([&] {
    server.run();
    close(from_server[1]);
  });

  std::mutex mu;
  std::map<int, Clock::time_point> sent;
  std::vector<double> latency;
  int cancelled = 0, with_items = 0, answered = 0, errors = 0, chats_done = 0;
  bool ready = false, typing = true;
  json final_status;
  // An editor's messages: `text` typed at (line, col), and a suggestion asked for there.
  const auto typed_at = [](const std::string& uri, int version, int line, int col, const std::string& text) {
    const json at = {{"line", line}, {"character", col}};
    return json{{"jsonrpc", "2.0"},
                {"method", "textDocument/didChange"},
                {"params",
                 {{"textDocument", {{"uri", uri}, {"version", version}}},
                  {"contentChanges", {{{"range", {{"start", at}, {"end", at}}}, {"text", text}}}}}}};
  };
  const auto suggestion_at = [](int id, const std::string& uri, int line, int col) {
    return json{{"jsonrpc", "2.0"},
                {"id", id},
                {"method", "textDocument/inlineCompletion"},
                {"params",
                 {{"textDocument", {{"uri", uri}}},
                  {"position", {{"line", line}, {"character", col}}},
                  {"context", {{"triggerKind", 2}}}}}};
  };
  const auto chat_request = [](int id) {
    return json{{"jsonrpc", "2.0"},
                {"id", id},
                {"method", "moelsp/chat"},
                {"params",
                 {{"messages", {{{"role", "user"}, {"content", "Tell a long story, number " + std::to_string(id)}}}}}}};
  };
  std::thread reader([&] {
    while (auto m = ct.read()) {
      if (!m->error.empty()) continue;
      const json j = json::parse(m->body, nullptr, false);
      std::lock_guard lock(mu);
      if (j.value("method", "") == "moelsp/status" && j["params"]["state"] == "ready") ready = true;
      if (!j.contains("id") || j.contains("method") || !j["id"].is_number_integer()) continue;
      const int id = j["id"];
      if (id >= 50 && id < 100) {  // a chat ended: keep N running while typing
        ++chats_done;
        if (typing) ct.write(chat_request(id).dump());
        continue;
      }
      if (id == 2) {  // moelsp/status at the end
        final_status = j["result"];
        continue;
      }
      if (id < 100) continue;
      ++answered;
      if (j.contains("error")) {
        if (j["error"]["code"] == -32800) ++cancelled;
        else ++errors;
        continue;
      }
      latency.push_back(std::chrono::duration<double, std::milli>(Clock::now() - sent[id]).count());
      if (!j["result"]["items"].empty()) ++with_items;
    }
  });

  auto send = [&](const json& j) { ct.write(j.dump()); };
  json completion = {
      {"maxTokens", max_tokens}, {"timeBudgetMs", 1000}, {"draftTokens", draft}, {"contextTokens", context_tokens}};
  if (!fim_order.empty()) completion["fimOrder"] = fim_order;
  send({{"jsonrpc", "2.0"},
        {"id", 1},
        {"method", "initialize"},
        {"params",
         {{"capabilities", {{"textDocument", {{"inlineCompletion", json::object()}}}}},
          {"rootUri", workspace.empty() ? json() : json("file://" + workspace)},
          {"initializationOptions",
           {{"model", model},
            {"threads", threads},
            {"contextSize", 4096},
            {"completion", completion},
            {"chat", {{"maxTokens", 2000}, {"template", "chatml"}}}}}}}});
  send({{"jsonrpc", "2.0"}, {"method", "initialized"}, {"params", json::object()}});
  for (int i = 0; i < 600; ++i) {
    {
      std::lock_guard lock(mu);
      if (ready) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (at_end > 0) {
    // The opened part: the first open_lines lines; typed: what follows them.
    size_t open_end = src.size();
    if (open_lines > 0)
      for (size_t at = 0, line_no = 0; at < src.size(); ++at)
        if (src[at] == '\n' && ++line_no == size_t(open_lines)) {
          open_end = at + 1;
          break;
        }
    std::string doc = src.substr(0, open_end);
    std::string typed = src.substr(open_end);
    while (typed.size() < size_t(at_end)) typed += "x = 1\n";  // past the end of the file: more code
    const std::string rest = keep_rest ? typed.substr(size_t(at_end)) : std::string();
    typed.resize(size_t(at_end));
    const std::string uri = !workspace.empty()
                                ? "file://" + std::filesystem::canonical(file).string()
                                : "file:///bench/edited" + std::filesystem::path(file).extension().string();
    send(
        {{"jsonrpc", "2.0"},
         {"method", "textDocument/didOpen"},
         {"params", {{"textDocument", {{"uri", uri}, {"languageId", "code"}, {"version", 1}, {"text", doc + rest}}}}}});
    int line = int(std::count(doc.begin(), doc.end(), '\n'));
    int col = int(doc.size() - (doc.rfind('\n') == std::string::npos ? 0 : doc.rfind('\n') + 1));
    json status_after_first;
    // Asks at the cursor and waits for the answer (up to a minute).
    const auto ask = [&](int id) {
      size_t before;
      {
        std::lock_guard lock(mu);
        before = latency.size() + size_t(cancelled + errors);
        sent[id] = Clock::now();
      }
      send(suggestion_at(id, uri, line, col));
      for (int i = 0; i < 6000; ++i) {
        {
          std::lock_guard lock(mu);
          if (latency.size() + size_t(cancelled + errors) > before) return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    };
    const auto status_now = [&] {
      {
        std::lock_guard lock(mu);
        final_status = json();
      }
      send({{"jsonrpc", "2.0"}, {"id", 2}, {"method", "moelsp/status"}});
      for (int i = 0; i < 500; ++i) {
        {
          std::lock_guard lock(mu);
          if (!final_status.is_null()) return final_status;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return json();
    };
    if (!workspace.empty())  // the walk first: typing measures queries, not the walk competing for the cores
      for (int i = 0; i < 6000 && status_now()["index"].value("state", "") != "ready"; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ask(100);
    status_after_first = status_now();
    for (int k = 0; k < at_end; ++k) {
      const std::string key = typed.substr(size_t(k), 1);
      send(typed_at(uri, k + 2, line, col, key));
      if (key == "\n") ++line, col = 0;
      else ++col;
      ask(101 + k);
    }
    const json last = status_now();
    send({{"jsonrpc", "2.0"}, {"id", 3}, {"method", "shutdown"}});
    send({{"jsonrpc", "2.0"}, {"method", "exit"}});
    srv.join();
    close(to_server[1]);
    reader.join();
    std::string in_order;
    for (double ms : latency) in_order += fmt::format(" {:.0f}", ms);
    std::vector<double> later(latency.begin() + (latency.empty() ? 0 : 1), latency.end());
    std::sort(later.begin(), later.end());
    const auto pct = [&](double p) {
      return later.empty() ? 0.0 : later[std::min(later.size() - 1, size_t(p * later.size()))];
    };
    fmt::print(
        "{}: {} ({} lines, {} bytes before the cursor, {} after), model {}, {}-token suggestions, {} edits, "
        "FIM order {}\n",
        keep_rest ? "edit-inside-the-file" : "edit-at-the-end", file, std::count(doc.begin(), doc.end(), '\n'),
        doc.size(), rest.size(), model, max_tokens, at_end, fim_order.empty() ? "the model's" : fim_order);
    const json b0 = status_after_first["completions"]["breakdown"], b1 = last["completions"]["breakdown"];
    const auto first_tokens = b0.value("promptTokensNew", int64_t(0));
    fmt::print("first suggestion: {:.0f} ms ({} prompt tokens prefilled in {:.0f} ms, {} generated in {:.0f} ms)\n",
               latency.empty() ? 0.0 : latency.front(), first_tokens, b0.value("promptMs", 0.0),
               b0.value("generatedTokens", int64_t(0)), b0.value("generateMs", 0.0));
    fmt::print(
        "later suggestions: p50 {:.0f} ms, p95 {:.0f} ms over {} answers ({} errors, {} from the suggestion cache)\n",
        pct(0.5), pct(0.95), later.size(), errors,
        last["completions"].value("cacheHits", int64_t(0)) -
            status_after_first["completions"].value("cacheHits", int64_t(0)));
    fmt::print("latencies in order (ms):{}\n", in_order);
    if (!workspace.empty()) {
      const json& ix = last["index"];
      fmt::print("workspace {}: {} files, {} chunks indexed in {:.0f} ms; completion.contextTokens {}\n", workspace,
                 ix.value("files", 0), ix.value("chunks", 0), ix.value("buildMs", 0.0), context_tokens);
    }
    const double n = double(std::max<int64_t>(1, b1.value("answers", int64_t(0)) - b0.value("answers", int64_t(0))));
    const auto per = [&](const char* k) { return (b1.value(k, 0.0) - b0.value(k, 0.0)) / n; };
    const auto per_i = [&](const char* k) { return double(b1.value(k, int64_t(0)) - b0.value(k, int64_t(0))) / n; };
    const double other = per("totalMs") - per("queueMs") - per("promptMs") - per("generateMs");
    fmt::print(
        "later suggestions, mean per answer: total {:.0f} ms = queue {:.0f} + prompt {:.0f} ({:.1f} new tokens) + "
        "decode {:.0f} ({:.1f} tokens) + other {:.0f} (tokenize, debounce, post-processing)\n",
        per("totalMs"), per("queueMs"), per("promptMs"), per_i("promptTokensNew"), per("generateMs"),
        per_i("generatedTokens"), other);
    return 0;
  }
  for (int k = 0; k < chats; ++k) send(chat_request(50 + k));
  const std::string uri = "file:///bench/typed.cpp";
  while (cursor > 0 && cursor < src.size() && (static_cast<unsigned char>(src[cursor]) & 0xC0) == 0x80) --cursor;
  std::string doc = src.substr(0, cursor);
  send({{"jsonrpc", "2.0"},
        {"method", "textDocument/didOpen"},
        {"params", {{"textDocument", {{"uri", uri}, {"languageId", "cpp"}, {"version", 1}, {"text", doc}}}}}});
  int line = int(std::count(doc.begin(), doc.end(), '\n'));
  int col = 0;
  const auto t_start = Clock::now();
  int n = 0;
  const auto proc_status = [] {  // (VmRSS MiB, threads)
    std::ifstream status("/proc/self/status");
    double rss = 0;
    int threads_now = 0;
    for (std::string l; std::getline(status, l);) {
      if (l.rfind("VmRSS:", 0) == 0) rss = std::stod(l.substr(6)) / 1024;
      if (l.rfind("Threads:", 0) == 0) threads_now = std::stoi(l.substr(8));
    }
    return std::pair{rss, threads_now};
  };
  auto next_report = t_start + std::chrono::duration<double>(report_s);
  size_t reported = 0;
  std::vector<double> rep_t, rep_rss, rep_threads, rep_p50, rep_p95;  // for --svg
  for (; n < keys; ++n) {
    if (cursor >= src.size()) break;
    if (report_s > 0 && Clock::now() >= next_report) {
      std::vector<double> window;
      {
        std::lock_guard lock(mu);
        window.assign(latency.begin() + long(reported), latency.end());
        reported = latency.size();
      }
      std::sort(window.begin(), window.end());
      const auto at = [&](double p) {
        return window.empty() ? 0.0 : window[std::min(window.size() - 1, size_t(p * window.size()))];
      };
      const auto [rss, nthreads] = proc_status();
      fmt::print("t={:.0f}s keys={} rss={:.1f} MiB threads={} latency p50 {:.1f} p95 {:.1f} ms ({} answers)\n",
                 std::chrono::duration<double>(Clock::now() - t_start).count(), n, rss, nthreads, at(0.5), at(0.95),
                 window.size());
      std::fflush(stdout);
      rep_t.push_back(std::chrono::duration<double>(Clock::now() - t_start).count());
      rep_rss.push_back(rss);
      rep_threads.push_back(nthreads);
      rep_p50.push_back(at(0.5));
      rep_p95.push_back(at(0.95));
      next_report += std::chrono::duration<double>(report_s);
    }
    // One key is one character: a whole UTF-8 sequence (positions count UTF-16 units).
    const auto lead = static_cast<unsigned char>(src[cursor]);
    const size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    const std::string key = src.substr(cursor, len);
    cursor += key.size();
    send(typed_at(uri, n + 2, line, col, key));
    if (key == "\n") ++line, col = 0;
    else col += len == 4 ? 2 : 1;
    const int id = 100 + n;
    {
      std::lock_guard lock(mu);
      sent[id] = Clock::now();
    }
    send(suggestion_at(id, uri, line, col));
    std::this_thread::sleep_until(t_start + std::chrono::milliseconds(int64_t(interval_ms) * (n + 1)));
  }
  {
    std::lock_guard lock(mu);
    typing = false;
  }
  for (int k = 0; k < chats; ++k)
    send({{"jsonrpc", "2.0"}, {"method", "$/cancelRequest"}, {"params", {{"id", 50 + k}}}});
  // let the last answers arrive
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard lock(mu);
      if (answered >= n) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  send({{"jsonrpc", "2.0"}, {"id", 2}, {"method", "moelsp/status"}});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  send({{"jsonrpc", "2.0"}, {"id", 3}, {"method", "shutdown"}});
  send({{"jsonrpc", "2.0"}, {"method", "exit"}});
  srv.join();
  close(to_server[1]);
  reader.join();

  std::sort(latency.begin(), latency.end());
  const auto pct = [&](double p) {
    return latency.empty() ? 0.0 : latency[std::min(latency.size() - 1, size_t(p * latency.size()))];
  };
  fmt::print(
      "typing simulation: {} keystrokes every {} ms into {} (model {}), {} chats running ({} chat answers ended "
      "meanwhile)\n",
      n, interval_ms, file, model, chats, chats_done);
  fmt::print(
      "answered {} of {} requests: {} with a suggestion, {} cancelled by a newer keystroke ({:.1f}%), {} errors\n",
      answered, n, with_items, cancelled, 100.0 * cancelled / std::max(1, n), errors);
  fmt::print("latency to the answer (ms), answered requests: p50 {:.1f}, p95 {:.1f}, max {:.1f}\n", pct(0.5), pct(0.95),
             latency.empty() ? 0.0 : latency.back());
  if (final_status.contains("scheduler")) {
    const json& sc = final_status["scheduler"];
    const int64_t steps = sc.value("steps", int64_t(0)), dsteps = sc.value("draftSteps", int64_t(0)),
                  dtok = sc.value("draftTokens", int64_t(0)), dacc = sc.value("draftAccepted", int64_t(0));
    fmt::print(
        "engine: {} forward passes; prompt lookup (--draft {}): {} steps carried {} draft tokens, {} confirmed "
        "({:.2f} extra tokens per drafted step, {:.0f}% of drafts)\n",
        steps, draft, dsteps, dtok, dacc, dsteps ? double(dacc) / double(dsteps) : 0.0,
        dtok ? 100.0 * double(dacc) / double(dtok) : 0.0);
  }
  if (!svg.empty()) {
    using moelsp::bench::PlotPanel;
    const std::string title =
        fmt::format("typing {} keys/s with {} chats running ({} model)", 1000 / std::max(1, interval_ms), chats,
                    std::filesystem::path(model).filename().string());
    const std::vector<PlotPanel> panels{
        {"RSS (MiB)", {{"RSS", "#1f77b4", rep_rss}}},
        {"threads", {{"threads", "#7f7f7f", rep_threads}}},
        {"latency (ms)", {{"p50", "#2ca02c", rep_p50}, {"p95", "#d62728", rep_p95}}},
    };
    std::ofstream(svg) << moelsp::bench::line_chart_svg(title, rep_t, "seconds", panels);
    fmt::print("wrote {}\n", svg);
  }
  return 0;
}
