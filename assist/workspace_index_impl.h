// WorkspaceIndex's state, shared by workspace_index.cpp (the walk, updates,
// the background thread) and workspace_query.cpp (context_for). Internal.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "assist/workspace_index.h"

namespace moelsp::assist {

// Identifier terms: the identifier lower-cased (unless a keyword or shorter
// than 2) and, when it has several snake_case / camelCase parts, each part
// of 3+ characters.
void for_each_term(std::string_view text, const std::function<void(std::string_view term)>& f);
// Identifiers of 3+ characters that are not keywords, as written.
void for_each_name(std::string_view text, const std::function<void(std::string_view name)>& f);

struct WorkspaceIndex::Impl {
  struct Chunk {
    uint32_t file = 0;
    uint32_t begin = 0, end = 0;  // bytes in the file
    uint32_t length = 0;          // terms (BM25's document length)
    bool alive = true;
  };
  // A chunk id and the term's count in it, in 4 bytes: postings are most of
  // the index (5 M of them for 15,000 files), and a count past 63 ranks the
  // same as 63 under BM25's saturation (k1 1.2).
  struct Posting {
    uint32_t bits;
    static constexpr uint32_t kTfBits = 6, kMaxChunks = 1u << (32 - kTfBits);
    Posting(uint32_t chunk, uint32_t tf) : bits(chunk << kTfBits | std::min(tf, (1u << kTfBits) - 1)) {}
    uint32_t chunk() const { return bits >> kTfBits; }
    uint32_t tf() const { return bits & ((1u << kTfBits) - 1); }
  };
  struct Def {
    uint32_t chunk;
    uint32_t offset;  // the defining line's first byte in the file
  };
  struct File {
    std::string path, rel;
    int root = -1;  // index into opt.roots; −1: an open document outside them
    uint32_t first_chunk = 0, n_chunks = 0;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    std::shared_ptr<const std::string> overlay;  // an open document's text
    bool alive = false;
  };

  mutable std::shared_mutex mu;  // everything below up to the queue
  IndexOptions opt;              // written only by the background thread (under mu), so it reads it without
  std::vector<File> files;
  std::unordered_map<std::string, uint32_t> file_ids;
  std::vector<Chunk> chunks;
  size_t live_files = 0, live_chunks = 0, dead_chunks = 0;
  uint64_t live_bytes = 0;
  uint64_t total_length = 0;  // of live chunks
  std::unordered_map<std::string, uint32_t> term_ids;
  std::vector<std::vector<Posting>> postings;
  size_t n_postings = 0;
  std::unordered_map<std::string, std::vector<Def>> defs;
  IndexStats counters;  // state, skips, updates, build time, bytes
  // Moves on every change (under the write lock); stats() recomputes the
  // memory estimate only when it has (readers race benignly: atomics).
  std::atomic<uint64_t> version{0};
  mutable std::atomic<uint64_t> memory_version{~uint64_t(0)}, memory_cached{0};

  // context_for's last answers. Typing inside a word does not change what
  // a query reads (whole words before the cursor), so without this each
  // keystroke repeated the same query — the names' lookups, the file's
  // names, BM25 and the snippets' reads from disk: about 1.3 ms of a 12 ms
  // answer on the typing benchmark. The key holds everything the answer
  // depends on; `version` moves with any change to the index.
  struct QueryKey {
    uint64_t version = 0;
    size_t budget = 0, prefix_hash = 0, suffix_hash = 0;
    std::string path, exclude;
    bool operator==(const QueryKey&) const = default;
  };
  mutable std::mutex memo_mu;
  mutable std::deque<std::pair<QueryKey, RepoContext>> memo;  // newest first
  static constexpr size_t kMemoEntries = 8;

  // The background thread's queue.
  enum class Op { Walk, Changed, Deleted, Overlay, CloseOverlay };
  struct Task {
    Op op;
    std::string path;
    std::shared_ptr<const std::string> text;
    std::shared_ptr<const IndexOptions> options;  // Walk
    std::chrono::steady_clock::time_point due{};  // not before (an overlay while typing)
  };
  std::mutex q_mu;
  std::condition_variable q_cv, idle_cv;
  std::deque<Task> queue;
  bool busy = false, stop = false;
  std::atomic<uint64_t> walk_gen{0};  // start() moves it: a walk under way gives up
  std::thread worker;

  void run();
  void push(Task t);
  void walk(const IndexOptions& o);
  // walk's first step: the index emptied for the new options; the open
  // documents (path, buffer) to index again from their buffers.
  std::vector<std::pair<std::string, std::shared_ptr<const std::string>>> restart(const IndexOptions& o);
  void apply(const Task& t);
  // Reads and indexes one file (the caller decided it may be read).
  void index_file(const std::string& path, const std::string& rel, int root,
                  std::shared_ptr<const std::string> overlay);
  void drop_file_locked(uint32_t id);
  void compact_locked();
  // The file's place under a root: (root, relative path), or (−1, name).
  std::pair<int, std::string> locate(const std::string& path) const;
  // Whether a file under a root may be read: not ignored by the .gitignore
  // files on its way down, nor excluded, nor vendor/hidden, nor non-source.
  bool admissible(const std::string& path, int root, const std::string& rel) const;
  // Whether the .gitignore files (and, with skipped_dirs, a hidden or vendor
  // directory) hide a path under a root.
  bool git_ignored(int root, const std::string& rel, bool skipped_dirs) const;
  // A chunk's text (overlay or file on disk; "" when the file changed since).
  std::string chunk_text(const Chunk& c, uint32_t from, uint32_t max_bytes) const;
  uint64_t memory_locked() const;
};

// A file's bytes, at most max_bytes (a little more: whole reads); false if it cannot be opened.
bool read_all(const std::string& path, std::string& out, size_t max_bytes);

// Whether a file name looks like source code or project text worth
// indexing (by extension and a few well-known names).
bool is_source_name(std::string_view name);
// A directory never walked: hidden, VCS, vendor and cache directories.
bool is_skipped_dir(std::string_view name);
// Generated code: a marker near the top, or a generated file's name.
bool looks_generated(std::string_view name, std::string_view text);

}  // namespace moelsp::assist
