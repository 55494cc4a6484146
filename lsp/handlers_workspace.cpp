// The workspace index's protocol side: the folders from initialize and
// workspace/didChangeWorkspaceFolders, file events from
// workspace/didChangeWatchedFiles (registered for `**/*` when the client
// can), open documents' text, moelsp/status "index", and the context a
// completion gets. The index itself is assist::WorkspaceIndex.
#include <spdlog/spdlog.h>

#include "assist/exclude.h"
#include "server_impl.h"

namespace moelsp::lsp {

namespace {

// Bytes of code per token, to turn a token budget into a byte budget for the
// index (the prompt builder then fits tokens exactly): code runs about 3
// bytes a token in the embedded model's vocabulary and 3.5-4 in the 150 k
// vocabularies, so 3 errs towards picking a little more than fits.
constexpr size_t kBytesPerToken = 3;

}  // namespace

void Server::Impl::start_index(const Settings& s) {
  assist::IndexOptions o;
  {
    std::lock_guard lock(roots_mu);
    o.roots = roots;
  }
  o.walk = s.workspace_index.value_or(true);
  o.exclude = assist::exclude_list(s.exclude);
  if (s.workspace_max_files) o.max_files = size_t(*s.workspace_max_files);
  std::string key = fmt::format("{}|{}|{}|", o.walk, o.max_files, s.exclude.value_or("(default)"));
  for (const auto& r : o.roots) key += r + "|";
  {
    std::lock_guard lock(roots_mu);
    if (key == index_key) return;
    index_key = key;
  }
  {
    std::lock_guard lock(sticky_mu);  // what was sent under other settings (an exclude glob) is not sent again
    sticky.clear();
    ++sticky_gen;
  }
  spdlog::info("index: {} workspace folder{}", o.roots.size(), o.roots.size() == 1 ? "" : "s");
  index.start(std::move(o));
}

json Server::Impl::index_status() {
  const assist::IndexStats st = index.stats();
  return {{"state", st.state},
          {"roots", st.roots},
          {"files", st.files},
          {"bytes", st.bytes},
          {"chunks", st.chunks},
          {"terms", st.terms},
          {"postings", st.postings},
          {"memoryBytes", st.memory_bytes},
          {"buildMs", st.build_ms},
          {"updates", st.updates},
          // moelsp/didResolveDefinitions: locations the editor sent, snippets made from them
          {"editorDefinitions", {{"received", editor_defs_received.load()}, {"sent", editor_defs_sent.load()}}},
          {"viewedRanges", viewed_received.load()},  // moelsp/didChangeVisibleRanges notifications
          {"skipped",
           {{"ignored", st.skipped_ignored},
            {"excluded", st.skipped_excluded},
            {"large", st.skipped_large},
            {"binary", st.skipped_binary},
            {"generated", st.skipped_generated},
            {"overLimit", st.skipped_limit}}}};
}

assist::RepoContext Server::Impl::repo_context(const std::string& uri, const assist::CompletionQuery& q,
                                               const Settings& s, const assist::ExcludeList& exclude, bool to_remote) {
  size_t tokens = size_t(s.completion_context_tokens.value_or(1024));
  if (const auto b = service.backend()) {
    // At most half of what the prompt may take (fim_prompt enforces it in tokens).
    if (const int budget = b->fim_prompt_budget(*s.completion_max_tokens); budget > 0)
      tokens = std::min(tokens, size_t(budget / 2));
  }
  if (tokens == 0) return {};
  const std::string_view text = q.text;
  const size_t cursor = std::min(q.cursor, text.size());
  uint64_t gen;
  {
    std::lock_guard lock(sticky_mu);
    gen = sticky_gen;
  }
  // From the editor first: its language servers' definitions (a third of the
  // budget at most) and the lines just edited or shown in other files (a
  // quarter); then the index's picks.
  const size_t budget = tokens * kBytesPerToken;
  std::vector<assist::Snippet> from_editor = editor_snippets(uri, q, exclude, to_remote, budget / 3);
  for (auto& sn : recent_snippets(uri, exclude, to_remote, budget / 4)) from_editor.push_back(std::move(sn));
  size_t editor_bytes = 0;
  for (const auto& sn : from_editor) editor_bytes += sn.text.size() + sn.path.size() + 4;
  assist::RepoContext c = index.context_for({.path = assist::path_of_uri(uri),
                                             .prefix = text.substr(0, cursor),
                                             .suffix = text.substr(cursor),
                                             .budget_bytes = budget - std::min(budget, editor_bytes)},
                                            exclude);
  if (!from_editor.empty()) {  // the index's own pick of the same definition goes
    std::erase_if(c.snippets, [&](const assist::Snippet& sn) {
      const std::string_view first = std::string_view(sn.text).substr(0, sn.text.find('\n'));
      return std::any_of(from_editor.begin(), from_editor.end(), [&](const assist::Snippet& e) {
        return e.file == sn.file && std::string_view(e.text).substr(0, e.text.find('\n')) == first;
      });
    });
    c.snippets.insert(c.snippets.begin(), from_editor.begin(), from_editor.end());
  }
  // What this document's last completion sent stays ahead where it can, so
  // the engine keeps its KV (typing with context on cost 1.4× the latency of
  // context off at p50 before this: each new pick moved every later one).
  std::lock_guard lock(sticky_mu);
  if (gen != sticky_gen) return c;  // the index restarted meanwhile (new rules): these picks start afresh
  auto& last = sticky[uri];
  // A kept snippet's file must still be in the index and not excluded: a
  // file deleted, gitignored or named by `exclude` since is not sent again.
  // (A file the editor's definitions name may lie outside the index: kept while they still name it.)
  // A kept snippet of a file the editor's context names now is replaced by
  // the fresh one (an edited or viewed document's lines move as it changes:
  // two versions of one function would both be sent).
  std::erase_if(last, [&](const assist::Snippet& sn) {
    const bool named = std::any_of(from_editor.begin(), from_editor.end(),
                                   [&](const assist::Snippet& e) { return e.file == sn.file; });
    return named || !index.holds(sn.file) || exclude.excluded(sn.file);
  });
  c.snippets = assist::merge_context(last, c.snippets, budget);
  last = c.snippets;
  return c;
}

void Server::Impl::on_did_change_watched_files(const DidChangeWatchedFilesParams& p) {
  for (const FileEvent& e : p.changes) {
    const std::string path = assist::path_of_uri(e.uri);
    if (e.type == FileChangeType::Deleted) index.file_deleted(path);
    else index.file_changed(path);
  }
}

void Server::Impl::on_did_change_workspace_folders(const DidChangeWorkspaceFoldersParams& p) {
  {
    std::lock_guard lock(roots_mu);
    for (const auto& uri : p.removed) std::erase(roots, assist::path_of_uri(uri));
    for (const auto& uri : p.added)
      if (std::find(roots.begin(), roots.end(), assist::path_of_uri(uri)) == roots.end())
        roots.push_back(assist::path_of_uri(uri));
  }
  start_index(effective());
}

}  // namespace moelsp::lsp
