// The workspace index: the project's files, cut into chunks at definition
// boundaries and indexed for retrieval, so that a completion can see the
// definition of a name from another file (the function the user is about to
// call, two files away).
//
// What is read: each root's files (workspaceFolders / rootUri), skipping
// what the root's .gitignore files hide (gitignore.h), what the `exclude`
// setting names (secrets: never read, so never sent), hidden and vendor
// directories (.git, node_modules, __pycache__, …), files that are not
// source code by their name, larger than max_file_bytes, binary (a NUL byte)
// or generated (a "generated"/"DO NOT EDIT" marker near the top, *.min.js,
// lock files); at most max_files files. Open documents join it from the
// editor's buffer (overlay), also outside any root.
//
// The index: per chunk (up to kChunkLines lines, starting at a definition or
// a top-level line after a blank one) its identifier terms for Okapi BM25
// (an identifier, lower-cased, and its snake_case / camelCase parts), and a
// table of the names defined in it (def/class/fn/function/struct/…, a
// top-level `NAME =`, a C-style `type name(` at the top level). No text is
// kept for files on disk: a chosen chunk is read again from its file (the
// page cache has it), checked against the size and mtime it was indexed
// with. For a 10,000-file tree the index holds the postings, not the code.
//
// Threads: one background thread (at low CPU priority, nice 10)
// walks the roots and applies updates; it takes the write lock per file,
// briefly. Completions query under the read lock and never wait for the walk.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "assist/exclude.h"
#include "assist/repo_context.h"

namespace moelsp::assist {

struct IndexOptions {
  std::vector<std::string> roots;  // absolute directory paths
  ExcludeList exclude{kDefaultExclude};
  size_t max_files = 20000;
  size_t max_file_bytes = 1 << 20;
  // Walk the roots (workspace.index); off: only open documents are indexed,
  // and the roots still place them (relative paths, .gitignore).
  bool walk = true;
};

struct IndexStats {
  std::string state = "off";  // off, indexing, ready
  size_t roots = 0, files = 0, chunks = 0, terms = 0, postings = 0;
  uint64_t bytes = 0;         // of the files indexed
  uint64_t memory_bytes = 0;  // the index's own (an estimate from its containers' sizes)
  size_t skipped_ignored = 0, skipped_excluded = 0, skipped_large = 0, skipped_binary = 0, skipped_generated = 0,
         skipped_limit = 0;
  size_t updates = 0;   // files indexed again after a change
  double build_ms = 0;  // the last full walk
};

// One completion's question: the file and the text around the cursor.
struct ContextQuery {
  std::string path;         // absolute path of the file being completed
  std::string_view prefix;  // text before the cursor (the context window's)
  std::string_view suffix;  // text after it
  size_t budget_bytes = 0;  // of snippet text, all together
};

class WorkspaceIndex {
 public:
  WorkspaceIndex();
  ~WorkspaceIndex();  // stops the background thread
  WorkspaceIndex(const WorkspaceIndex&) = delete;
  WorkspaceIndex& operator=(const WorkspaceIndex&) = delete;

  // Starts (or restarts, dropping what was indexed from disk) the walk of
  // the roots, in the background.
  void start(IndexOptions opt);
  // Applies a file change from the editor or the file system, in the
  // background: read the file again (created/changed) or drop it (deleted).
  // A change to a .gitignore starts the walk again.
  void file_changed(const std::string& path);
  void file_deleted(const std::string& path);
  // An open document's text replaces its file's (also outside any root);
  // `text` is a snapshot, indexed in the background. With `typing` (an
  // edit, not an open) it waits until the document has been still for
  // kTypingPauseMs: the file being typed in is never its own context, and
  // indexing it again per keystroke would take CPU from the keystroke's own
  // completion. close_document goes back to the file on disk.
  static constexpr int kTypingPauseMs = 750;
  void document_text(const std::string& path, std::shared_ptr<const std::string> text, bool typing = false);
  void close_document(const std::string& path);
  // Waits until the background queue is empty (tests, benchmarks).
  void wait_idle();

  IndexStats stats() const;
  // Whether a file is in the index now (read, not dropped, not excluded by the last walk's rules).
  bool holds(const std::string& path) const;
  // Whether a file under one of the roots is hidden by the .gitignore files
  // on its way down (not counting hidden or vendor folders the walk skips). Reads them: not for
  // every keystroke's hot path of a large tree, but cheap for a few levels.
  bool git_ignored(const std::string& path) const;
  // What goes ahead of the prompt for one cursor (see workspace_index.cpp:
  // definitions of names near the cursor first, then chunks similar to the
  // text around it), never from `path` itself, within budget_bytes. `exclude`
  // filters again at query time: the setting may have changed since.
  RepoContext context_for(const ContextQuery& q, const ExcludeList& exclude) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The chunk boundaries of a text: the first line of each chunk (0-based),
// ascending, starting with 0. Exposed for tests.
std::vector<uint32_t> chunk_starts(std::string_view text);
// The names a line defines (at most one; "" when none). Exposed for tests.
std::string_view defined_name(std::string_view line);

}  // namespace moelsp::assist
