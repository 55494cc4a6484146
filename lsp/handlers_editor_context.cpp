// Context from the editor (issue 45, item 2): the other files the user just
// edited (from didChange) or views (moelsp/didChangeVisibleRanges), and
// definitions from the editor's own language servers through
// moelsp/didResolveDefinitions; both notifications are our protocol extension. A client asks its
// other servers (textDocument/definition; VS Code's definition providers)
// where the names near the cursor are defined, and sends the locations:
//
//   {"method": "moelsp/didResolveDefinitions",
//    "params": {"textDocument": {"uri": "file:///p/app.py"},
//               "definitions": [{"name": "parse_args",
//                                "location": {"uri": "file:///p/cli.py", "range": {...}}}]}}
//
// Each notification replaces the document's set (at most 64). The server
// reads each definition's first lines itself (the open buffer, else the
// file), so `exclude` applies as to every other context. A file outside the
// workspace (a library's source, a stub) is welcome with the embedded
// engine: that is where the editor's servers know more than the index. With
// a remote backend only files inside the workspace folders that .gitignore
// does not hide go out: outside them no .gitignore is known to say what is
// private (editor_file_allowed).
// These snippets come first in the context: a language server resolves the
// name the code actually refers to, where the index guesses by name.
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "assist/exclude.h"
#include "server_impl.h"

namespace moelsp::lsp {

namespace {

// Whether `name` occurs as a whole identifier in `text`.
bool uses(std::string_view text, std::string_view name) {
  for (size_t at = text.find(name); at != std::string_view::npos; at = text.find(name, at + 1)) {
    const bool left = at == 0 || !assist::is_word_char(text[at - 1]);
    const bool right = at + name.size() >= text.size() || !assist::is_word_char(text[at + name.size()]);
    if (left && right) return true;
  }
  return false;
}

// A regular file's text up to 1 MiB ("" when it cannot be read; a FIFO or a
// device would block the completion's worker).
std::string read_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "";
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string s(1 << 20, '\0');
  in.read(s.data(), std::streamsize(s.size()));
  s.resize(size_t(in.gcount()));
  return s;
}

// Where the cursor's code is: the last ~1.5 KB before it and the first
// 400 bytes after it (the names a completion there is about to use).
constexpr size_t kNearBefore = 1536, kNearAfter = 400;

// `path` without "." and ".." parts: a root's prefix must not vouch for
// /root/../elsewhere.
std::string normal(const std::string& path) { return std::filesystem::path(path).lexically_normal().string(); }

}  // namespace

std::optional<std::string> Server::Impl::in_workspace(const std::string& path) {
  std::lock_guard lock(roots_mu);
  for (const std::string& r : roots)
    if (path.size() > r.size() + 1 && path.compare(0, r.size(), r) == 0 && path[r.size()] == '/')
      return path.substr(r.size() + 1);
  return std::nullopt;
}

std::string Server::Impl::context_path(const std::string& path_in) {
  const std::string path = normal(path_in);
  if (auto rel = in_workspace(path)) return *rel;
  // Outside the workspace (dist-packages/requests/api.py: what the model saw in training).
  size_t at = path.size();
  for (int k = 0; k < 3 && at != 0 && at != std::string::npos; ++k) at = path.rfind('/', at - 1);
  return at == std::string::npos ? path : path.substr(at + 1);
}

// The lines the user just changed in another file are what the code at the
// cursor most likely goes with (a function just written, a field just added:
// Continue's "recently edited ranges", llama.vscode's ring of chunks): the
// two documents edited last, a few lines around each last edit. Then what
// another editor shows (a split with the file being called into): the lines
// of the document viewed last (moelsp/didChangeVisibleRanges). Only open
// documents: their text is the editor's, newer than the disk's.
constexpr int kRecentBefore = 3, kRecentLines = 10, kViewedLines = 24;
constexpr size_t kRecentDocs = 2, kRecentBytes = 600, kViewedBytes = 900;

bool Server::Impl::editor_file_allowed(const std::string& path_in, const assist::ExcludeList& exclude, bool to_remote) {
  const std::string path = normal(path_in);
  if (exclude.excluded(path)) return false;
  if (!to_remote) return true;
  return in_workspace(path) && !index.git_ignored(path);
}

std::vector<assist::Snippet> Server::Impl::recent_snippets(const std::string& uri, const assist::ExcludeList& exclude,
                                                           bool to_remote, size_t budget_bytes) {
  struct Span {
    std::string uri;
    int line, lines;
    size_t bytes;
  };
  std::vector<Span> spans;
  {
    std::lock_guard lock(recent_mu);
    for (auto e = recent_edits.rbegin(); e != recent_edits.rend() && spans.size() < kRecentDocs; ++e)
      if (e->uri != uri) spans.push_back({e->uri, std::max(0, e->line - kRecentBefore), kRecentLines, kRecentBytes});
    for (auto v = viewed.rbegin(); v != viewed.rend(); ++v)
      if (v->uri != uri) {  // the one viewed last
        const int n = int(std::clamp<int64_t>(int64_t(v->range.end.line) - v->range.start.line + 1, 1, kViewedLines));
        spans.push_back({v->uri, std::max(0, v->range.start.line), n, kViewedBytes});
        break;
      }
  }
  std::vector<assist::Snippet> out;
  size_t used = 0;
  for (const Span& sp : spans) {
    const std::string path = assist::path_of_uri(sp.uri);
    if (!editor_file_allowed(path, exclude, to_remote)) continue;
    const auto doc = docs.get(sp.uri);
    if (!doc) continue;
    const std::string rel = context_path(path);
    const size_t cost = rel.size() + 4;
    if (used + cost >= budget_bytes) break;
    std::string text =
        assist::lines_at(*doc->text, size_t(sp.line), size_t(sp.lines), std::min(sp.bytes, budget_bytes - used - cost));
    if (text.find_first_not_of(" \t\n") == std::string::npos) continue;
    const bool dup = std::any_of(out.begin(), out.end(), [&](const assist::Snippet& o) { return o.text == text; });
    if (dup) continue;
    used += text.size() + cost;
    out.push_back({rel, std::move(text), path});
  }
  return out;
}

void Server::Impl::on_did_change_visible_ranges(const DidChangeVisibleRangesParams& p) {
  ++viewed_received;
  std::lock_guard lock(recent_mu);
  std::erase_if(viewed, [&](const Viewed& v) { return v.uri == p.uri; });
  if (p.ranges.empty() || p.ranges.front().start.line < 0) return;  // no longer shown
  viewed.push_back({p.uri, p.ranges.front()});
  if (viewed.size() > 8) viewed.pop_front();
}

void Server::Impl::on_did_resolve_definitions(const DidResolveDefinitionsParams& p) {
  if (!docs.get(p.uri)) return;  // closed meanwhile (a lookup ends after didClose): nothing to keep
  std::vector<EditorDefinition> defs;
  for (const EditorDefinition& d : p.definitions)
    if (!d.name.empty() && d.name.size() <= 128 && d.range.start.line >= 0) defs.push_back(d);
  editor_defs_received += defs.size();
  std::lock_guard lock(editor_defs_mu);
  editor_defs[p.uri] = std::move(defs);
}

std::vector<assist::Snippet> Server::Impl::editor_snippets(const std::string& uri, const assist::CompletionQuery& q,
                                                           const assist::ExcludeList& exclude, bool to_remote,
                                                           size_t budget_bytes) {
  std::vector<EditorDefinition> defs;
  {
    std::lock_guard lock(editor_defs_mu);
    if (const auto it = editor_defs.find(uri); it != editor_defs.end()) defs = it->second;
  }
  if (defs.empty()) return {};
  const size_t cursor = std::min(q.cursor, q.text.size());
  const std::string_view text = q.text, near = text.substr(cursor > kNearBefore ? cursor - kNearBefore : 0,
                                                           std::min(cursor, kNearBefore) + kNearAfter);
  std::vector<assist::Snippet> out;
  size_t used = 0;
  for (const EditorDefinition& d : defs) {
    if (!uses(near, d.name)) continue;
    const std::string path = assist::path_of_uri(d.uri);
    if (!editor_file_allowed(path, exclude, to_remote)) continue;
    if (d.uri == uri) {  // this document: only a definition outside the window the prompt already holds
      const auto doc = docs.get(uri);
      if (!doc) continue;
      const size_t at = offset_of(*doc->text, d.range.start);
      if (at >= q.text_offset && at <= q.text_offset + q.text.size()) continue;
    }
    const std::string rel = context_path(path);
    const auto doc = docs.get(d.uri);
    const std::string file_text = doc ? *doc->text : read_file(path);
    const size_t cost = rel.size() + 4;
    if (used + cost >= budget_bytes) break;
    std::string snippet = assist::lines_at(file_text, size_t(d.range.start.line), assist::kEditorDefinitionLines,
                                           std::min(assist::kEditorDefinitionBytes, budget_bytes - used - cost));
    if (snippet.empty()) continue;
    const bool dup = std::any_of(out.begin(), out.end(),
                                 [&](const assist::Snippet& s) { return s.file == path && s.text == snippet; });
    if (dup) continue;
    used += snippet.size() + cost;
    out.push_back({rel, std::move(snippet), path});
  }
  // A stable order, as the index's picks: by path, then text.
  std::sort(out.begin(), out.end(), [](const assist::Snippet& a, const assist::Snippet& b) {
    return a.path != b.path ? a.path < b.path : a.text < b.text;
  });
  editor_defs_sent += out.size();
  return out;
}

}  // namespace moelsp::lsp
