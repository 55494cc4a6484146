// moelsp_bench_crossfile: does a suggestion use a name defined in another
// file of the project — with the workspace index's context and without it?
//
//   moelsp_bench_crossfile [--root DIR] [--packages a,b,…] [--limit 120] [-m MODEL] [--context-tokens 1024]
//                          [--json FILE] [--show N] [--retrieval-only] [--at-name N]
//
// Cases come from multi-file Python packages the embedded model never saw
// (its corpus is the standard library; these are packages Debian installs
// under /usr/lib/python3/dist-packages): a line in a function body that uses
// a name N defined (def, class, module-level NAME =) in another file of the
// same package and nowhere earlier in the current file — the call the user
// is about to write to code two files away. The document is the file with
// that line's text cut out after its indentation, the cursor there, and the
// line's text the answer. Cases are every such line, at most 2 per file,
// drawn in a fixed shuffle (std::mt19937, seed 7) up to --limit. With
// --at-name N the user has begun the name: the line's code up to the name
// and the name's first N characters are typed, the rest of the line is the
// answer, and "uses the name" reads the typed part and the suggestion
// together (does the suggestion finish the right name?).
//
// Each case goes through the real language server (in this process over
// pipes, the same code as `moelsp lsp`): the packages are its workspace
// folders (its index walks them first), the file is opened under its own
// path, and one inline completion is asked for at the cursor — once with
// completion.contextTokens 0 (off) and once with --context-tokens (on).
//
// Retrieval: does the prompt hold N's definition? The bench builds the same
// prompt the server does — the index's picks for the cursor (an index of its
// own over the same folders, the server's query window and budget), fitted
// by assist::fim_prompt to the model's context — and looks for a line that
// defines N in the snippets that survive the fitting. Answers: exact match
// of the line, edit similarity, and whether the suggestion contains N.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "assist/completion.h"
#include "assist/service.h"
#include "assist/workspace_index.h"
#include "engine/default_model.h"
#include "engine/gguf.h"
#include "fim_cases.h"
#include "lsp/server.h"
#include "lsp/transport.h"

using json = nlohmann::json;
namespace fs = std::filesystem;
using namespace moelsp;

namespace {

struct Case {
  std::string path, document, answer, name;
  size_t cursor = 0;
  std::string typed;  // the line's code before the cursor (--at-name; "" at the line's start)
};

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool word_at(std::string_view text, size_t at, std::string_view w) {
  const auto word = [](char c) { return assist::is_word_char(c); };
  return text.substr(at, w.size()) == w && (at == 0 || !word(text[at - 1])) &&
         (at + w.size() >= text.size() || !word(text[at + w.size()]));
}
bool has_word(std::string_view text, std::string_view w) {
  for (size_t at = text.find(w); at != std::string_view::npos; at = text.find(w, at + 1))
    if (word_at(text, at, w)) return true;
  return false;
}

// Cross-file cases of one package (see the file's comment).
// at_name < 0: the cursor at the line's start; n >= 0: after the name's first n characters.
std::vector<Case> package_cases(const std::string& dir, int at_name) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".py" &&
        e.path().string().find("__pycache__") == std::string::npos)
      files.emplace_back(e.path().string(), read_file(e.path().string()));
  std::sort(files.begin(), files.end());
  std::map<std::string, std::set<size_t>> defined_in;  // name → files defining it
  for (size_t f = 0; f < files.size(); ++f)
    for (const auto& l : bench::fim_detail::split_lines(files[f].second)) {
      const std::string_view n =
          assist::defined_name(std::string_view(files[f].second).substr(l.begin, l.end - l.begin));
      if (n.size() >= 4 && !n.starts_with("__")) defined_in[std::string(n)].insert(f);
    }
  std::vector<Case> out;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string& text = files[f].second;
    std::map<std::string, size_t, std::less<>> first_at;  // each word's first offset in the file
    for (size_t i = 0; i < text.size();) {
      if (!assist::is_word_char(text[i])) {
        ++i;
        continue;
      }
      size_t e = i;
      while (e < text.size() && assist::is_word_char(text[e])) ++e;
      first_at.try_emplace(text.substr(i, e - i), i);
      i = e;
    }
    size_t taken = 0;
    bool in_import = false;  // inside `from m import (` … `)` or `\`-continued: names imported, not used
    bool in_string = false;  // inside a triple-quoted string (a docstring): prose, not code
    for (const auto& l : bench::fim_detail::split_lines(text)) {
      const std::string_view line = std::string_view(text).substr(l.begin, l.end - l.begin);
      if (in_import || line.starts_with("from ") || line.starts_with("import ")) {
        const bool opens = line.find('(') != std::string_view::npos, closes = line.find(')') != std::string_view::npos;
        in_import = ((in_import || opens) && !closes) || line.ends_with('\\');
        continue;
      }
      size_t quotes = 0;
      for (size_t q = line.find("\"\"\""); q != std::string_view::npos; q = line.find("\"\"\"", q + 3)) ++quotes;
      for (size_t q = line.find("'''"); q != std::string_view::npos; q = line.find("'''", q + 3)) ++quotes;
      const bool was_string = in_string;
      if (quotes % 2 == 1) in_string = !in_string;
      if (was_string || quotes > 0) continue;
      if (taken >= 2 || l.indent < 4) continue;  // a line in a body
      const std::string_view code = line.substr(size_t(l.indent));
      if (code.size() < 8 || code.size() > 100 || code.starts_with('#') || code.starts_with("def ") ||
          code.starts_with("class ") || code.starts_with('@') || code.starts_with("import ") ||
          code.starts_with("from ") || code.starts_with('"') || code.starts_with('\''))
        continue;
      std::string name;
      size_t name_at = 0;
      for (size_t i = 0; i < code.size() && name.empty();) {
        if (!assist::is_word_char(code[i])) {
          ++i;
          continue;
        }
        size_t e = i;
        while (e < code.size() && assist::is_word_char(code[e])) ++e;
        const std::string w(code.substr(i, e - i));
        // Used as code: called (`N(`) or reached through an object (`.N`);
        // defined in at most 3 files (`format`, `get`, `run` say nothing).
        const bool used = (e < code.size() && code[e] == '(') || (i > 0 && code[i - 1] == '.');
        const auto it = defined_in.find(w);
        if (used && w.size() >= 5 && it != defined_in.end() && it->second.size() <= 3 && !it->second.count(f) &&
            first_at.find(w)->second >= l.begin)
          name = w, name_at = i;
        i = e;
      }
      if (name.empty()) continue;
      const size_t start = l.begin + size_t(l.indent);
      const std::string typed(at_name < 0 ? std::string_view()
                                          : code.substr(0, name_at + std::min(size_t(at_name), name.size() - 1)));
      out.push_back({files[f].first, text.substr(0, start) + typed + text.substr(l.end),
                     std::string(code.substr(typed.size())), name, start + typed.size(), typed});
      ++taken;
    }
  }
  return out;
}

// A synchronous LSP client over the in-process server.
class Lsp {
 public:
  Lsp(const std::vector<std::string>& roots, const std::string& model, int context_tokens) {
    if (pipe(to_) || pipe(from_)) throw std::runtime_error("pipe");
    st_ = std::make_unique<lsp::Transport>(to_[0], from_[1]);
    ct_ = std::make_unique<lsp::Transport>(from_[0], to_[1]);
    server_ = std::make_unique<lsp::Server>(*st_, lsp::ServerOptions{});
    srv_ = std::thread([this] {
      server_->run();
      close(from_[1]);
    });
    reader_ = std::thread([this] {
      while (auto m = ct_->read()) {
        if (!m->error.empty()) continue;
        json j = json::parse(m->body, nullptr, false);
        std::lock_guard lock(mu_);
        // (The key first: json's operator= takes its argument by value, so
        // `answers_[j["id"].dump()] = std::move(j)` would move j before reading its id.)
        if (j.contains("id") && !j.contains("method")) {
          const std::string key = j["id"].dump();
          answers_[key] = std::move(j);
        }
        cv_.notify_all();
      }
    });
    json folders = json::array();
    for (const auto& r : roots) folders.push_back({{"uri", "file://" + r}, {"name", fs::path(r).filename().string()}});
    json opts = {{"completion", {{"contextTokens", context_tokens}, {"timeBudgetMs", 600000}, {"draftTokens", 0}}}};
    if (!model.empty()) opts["model"] = model;
    request("initialize", {{"capabilities", {{"textDocument", {{"inlineCompletion", json::object()}}}}},
                           {"workspaceFolders", folders},
                           {"initializationOptions", opts}});
    notify("initialized", json::object());
    for (int i = 0; i < 12000; ++i) {  // the model loaded and the folders walked
      const json s = request("moelsp/status", json::object());
      if (s["result"].value("state", "") == "error") throw std::runtime_error(s["result"].value("message", ""));
      if (s["result"].value("state", "") == "ready" && s["result"]["index"].value("state", "") == "ready") {
        status = s["result"];
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~Lsp() {
    request("shutdown", nullptr);
    notify("exit", nullptr);
    srv_.join();
    close(to_[1]);
    reader_.join();
    close(to_[0]);
    close(from_[0]);
  }
  json request(const std::string& method, json params) {
    const int id = next_++;
    ct_->write(json{{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}}.dump());
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return answers_.count(std::to_string(id)) > 0; });
    json j = std::move(answers_[std::to_string(id)]);
    answers_.erase(std::to_string(id));
    return j;
  }
  void notify(const std::string& method, json params) {
    ct_->write(json{{"jsonrpc", "2.0"}, {"method", method}, {"params", params}}.dump());
  }
  // One suggestion at `cursor` of `text`, opened as `path`.
  std::string complete(const std::string& path, const std::string& text, size_t cursor) {
    const std::string uri = "file://" + path;
    notify("textDocument/didOpen",
           {{"textDocument", {{"uri", uri}, {"languageId", "python"}, {"version", 1}, {"text", text}}}});
    const std::string before = text.substr(0, cursor);
    const int line = int(std::count(before.begin(), before.end(), '\n'));
    const int col = int(before.size() - (before.rfind('\n') == std::string::npos ? 0 : before.rfind('\n') + 1));
    const json r = request("textDocument/inlineCompletion", {{"textDocument", {{"uri", uri}}},
                                                             {"position", {{"line", line}, {"character", col}}},
                                                             {"context", {{"triggerKind", 2}}}});
    notify("textDocument/didClose", {{"textDocument", {{"uri", uri}}}});
    const json& items = r["result"]["items"];
    return items.empty() ? std::string() : items[0].value("insertText", std::string());
  }
  json status;

 private:
  int to_[2], from_[2];
  std::unique_ptr<lsp::Transport> st_, ct_;
  std::unique_ptr<lsp::Server> server_;
  std::thread srv_, reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, json> answers_;
  int next_ = 10;
};

struct Totals {
  size_t n = 0, exact = 0, uses = 0, nonempty = 0;
  double sim = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moelsp_bench_crossfile: suggestions that need a name from another file, with and without context"};
  std::string root = "/usr/lib/python3/dist-packages", model, json_out;
  std::string packages = "jinja2,jsonschema,attr,yaml,oauthlib,jwt,argcomplete,httplib2,pygments,cryptography";
  size_t limit = 120;
  int context_tokens = 1024, show = 0;
  bool retrieval_only = false;
  int at_name = -1;
  app.add_option("--root", root, "where the packages are")->capture_default_str();
  app.add_option("--packages", packages, "comma-separated package folders under --root")->capture_default_str();
  app.add_option("--limit", limit, "cases")->capture_default_str();
  app.add_option("-m,--model", model, "GGUF model (default: the embedded default model)");
  app.add_option("--context-tokens", context_tokens, "completion.contextTokens with context on")->capture_default_str();
  app.add_option("--json", json_out, "write the figures and every case here");
  app.add_option("--show", show, "print this many cases");
  app.add_option("--at-name", at_name,
                 "put the cursor after the name's first N characters (the user has begun to type it) instead of at the "
                 "line's start");
  app.add_flag("--retrieval-only", retrieval_only,
               "measure only what the prompt holds (no answers: seconds, not minutes)");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  std::vector<std::string> roots;
  std::vector<Case> cases;
  for (size_t at = 0; at <= packages.size();) {
    const size_t comma = std::min(packages.find(',', at), packages.size());
    const fs::path dir = fs::path(root) / packages.substr(at, comma - at);
    at = comma + 1;
    if (!fs::is_directory(dir)) {
      std::fprintf(stderr, "skipping %s: not installed\n", dir.c_str());
      continue;
    }
    roots.push_back(fs::canonical(dir).string());
    auto more = package_cases(roots.back(), at_name);
    cases.insert(cases.end(), more.begin(), more.end());
  }
  std::mt19937 g(7);
  bench::fim_detail::shuffle(cases, g);
  if (cases.size() > limit) cases.resize(limit);
  if (cases.empty()) {
    std::fprintf(stderr, "no cases: none of the packages (%s) is installed under %s\n", packages.c_str(), root.c_str());
    return 1;
  }
  const std::string model_path = model.empty() ? default_model_path() : model;
  const auto file = gguf::File::open(model_path);
  const auto tok = Tokenizer::from_gguf(file);

  // The answers, through the language server: context off, then on.
  std::vector<std::string> answers[2];
  int n_ctx = 0;
  double seconds[2] = {0, 0};
  for (int mode = 0; mode < 2; ++mode) {
    Lsp lsp(roots, model, mode == 0 ? 0 : context_tokens);
    n_ctx = lsp.status["plan"].value("contextSize", 0);
    if (retrieval_only) {
      answers[0].assign(cases.size(), "");
      answers[1].assign(cases.size(), "");
      break;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (const Case& c : cases) answers[mode].push_back(lsp.complete(c.path, c.document, c.cursor));
    seconds[mode] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (mode == 1)
      fmt::print("workspace: {} folders, {} files, {} chunks indexed in {:.0f} ms\n", roots.size(),
                 lsp.status["index"].value("files", 0), lsp.status["index"].value("chunks", 0),
                 lsp.status["index"].value("buildMs", 0.0));
  }

  // Retrieval: the prompt the server builds with context on (see the file's comment).
  assist::WorkspaceIndex index;
  index.start({.roots = roots});
  index.wait_idle();
  const int max_tokens = 64;  // completion.maxTokens's default, as the server ran
  const int prompt_budget = std::max(n_ctx - max_tokens, n_ctx / 2);
  const size_t budget_tokens = std::min<size_t>(size_t(context_tokens), size_t(prompt_budget / 2));
  size_t picked = 0, in_prompt = 0;
  std::vector<bool> held;
  for (const Case& c : cases) {
    const assist::CompletionQuery q = assist::query_at(c.document, c.cursor);
    assist::CompletionContext ctx = assist::make_context(q.text, q.cursor, 6000, 400, q.text_offset == 0);
    ctx.repo = index.context_for({.path = c.path,
                                  .prefix = std::string_view(q.text).substr(0, q.cursor),
                                  .suffix = std::string_view(q.text).substr(q.cursor),
                                  .budget_bytes = budget_tokens * 3},
                                 assist::exclude_list(std::nullopt));
    const auto defines = [&](std::string_view text) {
      for (const auto& l : bench::fim_detail::split_lines(text))
        if (assist::defined_name(text.substr(l.begin, l.end - l.begin)) == c.name) return true;
      return false;
    };
    bool any = false;
    for (const auto& s : ctx.repo.snippets) any = any || defines(s.text);
    picked += any;
    const auto prompt = assist::fim_prompt(*tok, ctx, size_t(prompt_budget), assist::FimOrder::kModel, nullptr,
                                           size_t(prompt_budget) / 2);  // as assist/engine_backend.cpp asks
    const bool kept = defines(tok->decode(prompt));
    in_prompt += kept;
    held.push_back(kept);
  }

  Totals t[2];
  json rows = json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    json row = {
        {"file", cases[i].path}, {"name", cases[i].name}, {"answer", cases[i].answer}, {"in_prompt", bool(held[i])}};
    for (int mode = 0; mode < 2; ++mode) {
      const std::string& s = answers[mode][i];
      const bench::FimScore sc = bench::score(s, cases[i].answer);
      Totals& x = t[mode];
      ++x.n;
      x.exact += sc.first_line_exact;
      x.sim += sc.edit_similarity;
      x.uses += has_word(cases[i].typed + s, cases[i].name);
      x.nonempty += !s.empty();
      row[mode == 0 ? "off" : "on"] = s;
    }
    rows.push_back(row);
    if (int(i) < show)
      fmt::print("--- {} (needs {}):\n  answer: {}\n  off:    {}\n  on:     {}\n", cases[i].path, cases[i].name,
                 cases[i].answer, answers[0][i], answers[1][i]);
  }
  const double n = double(cases.size());
  fmt::print("cases: {} lines from {} packages that use a name defined in another file of the package\n", cases.size(),
             roots.size());
  fmt::print(
      "retrieval: the index's picks hold the name's definition in {}/{} ({:.0f}%); the fitted prompt in {}/{} "
      "({:.0f}%) (context budget {} tokens of a {}-token prompt)\n",
      picked, cases.size(), 100 * double(picked) / n, in_prompt, cases.size(), 100 * double(in_prompt) / n,
      budget_tokens, prompt_budget);
  for (int mode = 0; mode < 2 && !retrieval_only; ++mode)
    fmt::print(
        "context {}: uses the name {:.1f}% ({}), line exact {:.1f}%, edit similarity {:.3f}, {} non-empty, {:.1f} s\n",
        mode == 0 ? "off" : "on ", 100 * double(t[mode].uses) / n, t[mode].uses, 100 * double(t[mode].exact) / n,
        t[mode].sim / n, t[mode].nonempty, seconds[mode]);
  if (!json_out.empty()) {
    json j = {{"cases", cases.size()},
              {"packages", roots},
              {"model", model_path},
              {"retrieval_picked", double(picked) / n},
              {"retrieval_in_prompt", double(in_prompt) / n},
              {"context_budget_tokens", budget_tokens},
              {"rows", rows}};
    for (int mode = 0; mode < 2; ++mode)
      j[mode == 0 ? "off" : "on"] = {{"uses_name", double(t[mode].uses) / n},
                                     {"line_exact", double(t[mode].exact) / n},
                                     {"edit_similarity", t[mode].sim / n},
                                     {"seconds", seconds[mode]}};
    std::ofstream(json_out) << j.dump(2) << "\n";
  }
  return 0;
}
