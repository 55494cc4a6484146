// The workspace index's moving parts: the background thread, the walk over
// the roots, files indexed and dropped, statistics. The text side is
// workspace_terms.cpp; the query, workspace_query.cpp.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "assist/gitignore.h"
#include "assist/workspace_index_impl.h"

namespace moelsp::assist {

namespace fs = std::filesystem;

namespace {

constexpr int kMaxDepth = 48;  // directory levels walked (a symlink loop is never followed anyway)

bool stat_file(const std::string& path, uint64_t& size, int64_t& mtime_ns) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  size = uint64_t(st.st_size);
  mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return true;
}

std::vector<IgnoreRule> read_ignore_file(const std::string& path) {
  std::string text;
  if (!read_all(path, text, 1 << 20)) return {};
  return parse_gitignore(text);
}

std::string name_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

bool read_all(const std::string& path, std::string& out, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out.clear();
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
    out.append(buf, size_t(n));
    if (out.size() > max_bytes) break;
  }
  ::close(fd);
  return true;
}

// ---- the background thread -------------------------------------------------------

WorkspaceIndex::WorkspaceIndex() : impl_(std::make_unique<Impl>()) {
  impl_->worker = std::thread([this] { impl_->run(); });
}

WorkspaceIndex::~WorkspaceIndex() {
  {
    std::lock_guard lock(impl_->q_mu);
    impl_->stop = true;
  }
  impl_->q_cv.notify_all();
  impl_->worker.join();
}

void WorkspaceIndex::Impl::run() {
  // The index is for later keystrokes; the engine's threads and the editor's
  // requests come first. Nice 10 (this thread only, on Linux) weighs 110
  // against a normal thread's 1024: about a tenth of a core while the engine
  // keeps both busy, all of an idle one. SCHED_IDLE (weight 3) would starve
  // the walk for as long as a chat runs.
  if (setpriority(PRIO_PROCESS, pid_t(gettid()), 10) != 0) spdlog::debug("index: could not lower its priority");
  for (;;) {
    Task t;
    {
      std::unique_lock lock(q_mu);
      busy = false;
      idle_cv.notify_all();
      q_cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (stop) return;
      // The first task that is due: an overlay still being typed waits for
      // its pause (a newer keystroke moves it), and the others pass it.
      const auto now = std::chrono::steady_clock::now();
      auto next = std::find_if(queue.begin(), queue.end(), [&](const Task& q) { return q.due <= now; });
      if (next == queue.end()) {
        const auto due = std::min_element(queue.begin(), queue.end(), [](const Task& a, const Task& b) {
                           return a.due < b.due;
                         })->due;
        q_cv.wait_until(lock, due);  // or sooner, when a task arrives
        continue;
      }
      t = std::move(*next);
      queue.erase(next);
      busy = true;
    }
    try {
      apply(t);
    } catch (const std::exception& e) {  // a file system error must not end the thread
      spdlog::warn("index: {}: {}", t.path, e.what());
    }
  }
}

void WorkspaceIndex::Impl::push(Task t) {
  {
    std::lock_guard lock(q_mu);
    // Closing a document drops its text still waiting to be indexed; a newer
    // overlay of it replaces one still waiting.
    if (t.op == Op::CloseOverlay)
      std::erase_if(queue, [&](const Task& q) { return q.op == Op::Overlay && q.path == t.path; });
    if (t.op == Op::Overlay)
      for (Task& q : queue)
        if (q.op == Op::Overlay && q.path == t.path) {
          q.text = std::move(t.text);
          q.due = t.due;
          return;
        }
    queue.push_back(std::move(t));
  }
  q_cv.notify_all();
}

void WorkspaceIndex::start(IndexOptions opt) {
  for (std::string& r : opt.roots)
    while (r.size() > 1 && r.back() == '/') r.pop_back();
  {
    std::unique_lock lock(impl_->mu);
    impl_->counters.state = opt.roots.empty() ? "ready" : "indexing";
  }
  {
    std::lock_guard lock(impl_->q_mu);  // a walk still waiting is superseded
    std::erase_if(impl_->queue, [](const Impl::Task& t) { return t.op == Impl::Op::Walk; });
  }
  ++impl_->walk_gen;
  impl_->push({Impl::Op::Walk, "", nullptr, std::make_shared<const IndexOptions>(std::move(opt)), {}});
}
void WorkspaceIndex::file_changed(const std::string& path) {
  impl_->push({Impl::Op::Changed, path, nullptr, nullptr, {}});
}
void WorkspaceIndex::file_deleted(const std::string& path) {
  impl_->push({Impl::Op::Deleted, path, nullptr, nullptr, {}});
}
void WorkspaceIndex::document_text(const std::string& path, std::shared_ptr<const std::string> text, bool typing) {
  const auto due = typing ? std::chrono::steady_clock::now() + std::chrono::milliseconds(kTypingPauseMs)
                          : std::chrono::steady_clock::time_point{};
  impl_->push({Impl::Op::Overlay, path, std::move(text), nullptr, due});
}
void WorkspaceIndex::close_document(const std::string& path) {
  impl_->push({Impl::Op::CloseOverlay, path, nullptr, nullptr, {}});
}
void WorkspaceIndex::wait_idle() {
  std::unique_lock lock(impl_->q_mu);
  impl_->idle_cv.wait(lock, [&] { return impl_->stop || (!impl_->busy && impl_->queue.empty()); });
}

// ---- where a file stands -------------------------------------------------------------

std::pair<int, std::string> WorkspaceIndex::Impl::locate(const std::string& path) const {
  for (size_t r = 0; r < opt.roots.size(); ++r) {
    const std::string& root = opt.roots[r];
    if (path.size() > root.size() + 1 && path.compare(0, root.size(), root) == 0 && path[root.size()] == '/')
      return {int(r), path.substr(root.size() + 1)};
  }
  return {-1, name_of(path)};
}

bool WorkspaceIndex::Impl::admissible(const std::string& path, int root, const std::string& rel) const {
  if (opt.exclude.excluded(path) || !is_source_name(name_of(path))) return false;
  return root < 0 || !git_ignored(root, rel, true);
}

bool WorkspaceIndex::holds(const std::string& path) const {
  std::shared_lock lock(impl_->mu);
  const auto it = impl_->file_ids.find(path);
  return it != impl_->file_ids.end() && impl_->files[it->second].alive;
}

bool WorkspaceIndex::git_ignored(const std::string& path) const {
  std::shared_lock lock(impl_->mu);
  const auto [root, rel] = impl_->locate(path);
  return root >= 0 && impl_->git_ignored(root, rel, false);
}

bool WorkspaceIndex::Impl::git_ignored(int root, const std::string& rel, bool skipped_dirs) const {
  // The .gitignore files from the root down to the file's directory.
  IgnoreStack stack;
  const std::string& base = opt.roots[size_t(root)];
  stack.push({"", read_ignore_file(base + "/.git/info/exclude")});
  stack.push({"", read_ignore_file(base + "/.gitignore")});
  for (size_t slash = rel.find('/'); slash != std::string::npos; slash = rel.find('/', slash + 1)) {
    const std::string dir = rel.substr(0, slash);
    if ((skipped_dirs && is_skipped_dir(name_of(dir))) || stack.ignored(dir, true)) return true;
    stack.push({dir, read_ignore_file(base + "/" + dir + "/.gitignore")});
  }
  return stack.ignored(rel, false);
}

// ---- changes ---------------------------------------------------------------------------

void WorkspaceIndex::Impl::apply(const Task& t) {
  if (t.op == Op::Walk) return walk(*t.options);
  const auto [root, rel] = locate(t.path);
  if (name_of(t.path) == ".gitignore" && root >= 0) {  // what may be read has changed: walk again
    if (t.op != Op::Overlay && t.op != Op::CloseOverlay) walk(opt);
    return;
  }
  std::shared_ptr<const std::string> overlay;
  {
    std::shared_lock lock(mu);
    if (const auto it = file_ids.find(t.path); it != file_ids.end()) overlay = files[it->second].overlay;
  }
  switch (t.op) {
    case Op::Deleted:
    case Op::Changed:
      if (overlay) return;  // the editor's buffer, not the disk, stands for an open document
      break;
    case Op::Overlay: overlay = t.text; break;
    case Op::CloseOverlay: overlay.reset(); break;
    case Op::Walk: break;
  }
  if (!admissible(t.path, root, rel) || (t.op == Op::Deleted) ||
      (t.op == Op::CloseOverlay && root < 0)) {  // gone, or an open file outside the roots closed
    std::unique_lock lock(mu);
    if (const auto it = file_ids.find(t.path); it != file_ids.end()) drop_file_locked(it->second);
    return;
  }
  index_file(t.path, rel, root, overlay);
  std::unique_lock lock(mu);
  ++counters.updates;
}

namespace {

// A walk of one root, depth-first, with the .gitignore rules in force at
// each level; it gives up when a newer walk starts or the index stops.
struct TreeWalker {
  WorkspaceIndex::Impl& self;
  const IndexOptions& o;
  IndexStats& skips;
  size_t& seen;
  uint64_t gen;
  IgnoreStack stack;

  bool superseded() {
    if (self.walk_gen != gen) return true;
    std::lock_guard lock(self.q_mu);
    return self.stop;
  }
  void dir(int root, const std::string& abs, const std::string& rel, int depth) {
    if (depth > kMaxDepth) return;
    stack.push({rel, read_ignore_file(abs + "/.gitignore")});
    std::error_code ec;
    std::vector<fs::directory_entry> entries;
    for (fs::directory_iterator it(abs, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(*it);
    std::sort(entries.begin(), entries.end());  // the same tree is read in the same order
    for (const auto& e : entries) {
      if (superseded()) break;
      const std::string name = e.path().filename().string();
      const std::string child_rel = rel.empty() ? name : rel + "/" + name;
      const std::string child_abs = abs + "/" + name;
      std::error_code sec;
      const fs::file_status st = e.symlink_status(sec);
      if (sec || fs::is_symlink(st)) continue;  // never followed: loops, and files outside the tree
      if (fs::is_directory(st)) {
        if (is_skipped_dir(name) || stack.ignored(child_rel, true)) {
          ++skips.skipped_ignored;
          continue;
        }
        dir(root, child_abs, child_rel, depth + 1);
      } else if (fs::is_regular_file(st)) {
        file(root, child_abs, child_rel, name);
      }
    }
    stack.pop();
  }
  void file(int root, const std::string& abs, const std::string& rel, const std::string& name) {
    if (!is_source_name(name)) return;  // not counted: most of a tree is not code
    if (stack.ignored(rel, false)) return void(++skips.skipped_ignored);
    if (o.exclude.excluded(abs)) return void(++skips.skipped_excluded);
    if (seen >= o.max_files) return void(++skips.skipped_limit);
    ++seen;
    {
      std::shared_lock lock(self.mu);  // an open document is indexed from its buffer, not from disk
      if (const auto it = self.file_ids.find(abs); it != self.file_ids.end() && self.files[it->second].overlay) return;
    }
    self.index_file(abs, rel, root, nullptr);
  }
};

}  // namespace

std::vector<std::pair<std::string, std::shared_ptr<const std::string>>> WorkspaceIndex::Impl::restart(
    const IndexOptions& o) {
  // A walk starts from an empty index (chunk ids start again at 0, no
  // per-file compaction under the lock); the open documents are indexed
  // again from their buffers, checked against the new rules.
  std::vector<std::pair<std::string, std::shared_ptr<const std::string>>> open_docs;
  std::unique_lock lock(mu);
  opt = o;
  for (const File& f : files)
    if (f.alive && f.overlay) open_docs.emplace_back(f.path, f.overlay);
  ++version;
  files.clear();
  file_ids.clear();
  chunks.clear();
  term_ids.clear();
  postings.clear();
  defs.clear();
  live_files = live_chunks = dead_chunks = n_postings = 0;
  live_bytes = total_length = 0;
  const IndexStats keep = counters;
  counters = IndexStats{};
  counters.state = "indexing";
  counters.updates = keep.updates;
  return open_docs;
}

void WorkspaceIndex::Impl::walk(const IndexOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const IndexOptions o = options;  // (may be `opt` itself)
  for (const auto& [path, text] : restart(o)) {
    const auto [root, rel] = locate(path);
    if (admissible(path, root, rel)) index_file(path, rel, root, text);
  }
  size_t seen = 0;
  IndexStats skips;
  TreeWalker w{*this, o, skips, seen, walk_gen.load(), {}};
  for (size_t r = 0; r < o.roots.size() && o.walk; ++r) {
    w.stack = IgnoreStack{};
    w.stack.push({"", read_ignore_file(o.roots[r] + "/.git/info/exclude")});
    w.dir(int(r), o.roots[r], "", 0);
  }
  std::unique_lock lock(mu);
  if (walk_gen != w.gen) return;  // superseded: the next walk reports
  counters.skipped_ignored += skips.skipped_ignored;
  counters.skipped_excluded += skips.skipped_excluded;
  counters.skipped_limit += skips.skipped_limit;
  counters.state = "ready";
  counters.build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("index: {} files, {} chunks, {} terms in {:.0f} ms ({} roots)", live_files, live_chunks, term_ids.size(),
               counters.build_ms, o.roots.size());
}

// ---- one file in, one file out ------------------------------------------------------

namespace {

// A chunk of a file as it is analysed, outside the index's lock: its bytes,
// its terms with their counts, and the names it defines.
struct Piece {
  uint32_t begin, end, length = 0;
  std::vector<std::pair<std::string, uint32_t>> tf;
  std::vector<std::pair<std::string, uint32_t>> names;  // (name, line offset)
};

// A file's text cut into chunks at its definitions, each analysed.
std::vector<Piece> analyse(std::string_view text) {
  std::vector<Piece> pieces;
  const std::vector<uint32_t> starts = chunk_starts(text);
  std::vector<size_t> line_at{0};  // byte offset of each line
  for (size_t i = text.find('\n'); i != std::string_view::npos; i = text.find('\n', i + 1)) line_at.push_back(i + 1);
  std::unordered_map<std::string, uint32_t> tf;
  for (size_t c = 0; c < starts.size(); ++c) {
    const size_t b = line_at[std::min<size_t>(starts[c], line_at.size() - 1)];
    const size_t e = c + 1 < starts.size() ? line_at[std::min<size_t>(starts[c + 1], line_at.size() - 1)] : text.size();
    if (e <= b) continue;
    Piece p{uint32_t(b), uint32_t(e), 0, {}, {}};
    const std::string_view body = text.substr(b, e - b);
    tf.clear();
    for_each_term(body, [&](std::string_view t) { ++tf[std::string(t)], ++p.length; });
    p.tf.assign(tf.begin(), tf.end());
    for (size_t at = 0; at < body.size();) {
      const size_t nl = body.find('\n', at);
      const std::string_view line = body.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
      if (const std::string_view n = defined_name(line); !n.empty())
        p.names.emplace_back(std::string(n), uint32_t(b + at));
      at = nl == std::string_view::npos ? body.size() : nl + 1;
    }
    pieces.push_back(std::move(p));
  }
  return pieces;
}

}  // namespace

void WorkspaceIndex::Impl::index_file(const std::string& path, const std::string& rel, int root,
                                      std::shared_ptr<const std::string> overlay) {
  // Read and analyse outside the lock; insert under it.
  std::string disk;
  uint64_t size = 0;
  int64_t mtime = 0;
  const auto count = [&](size_t IndexStats::*field) {
    std::unique_lock lock(mu);
    ++(counters.*field);
    if (const auto it = file_ids.find(path); it != file_ids.end()) drop_file_locked(it->second);
  };
  const auto gone = [&] {  // deleted, or never saved: what was indexed for it goes too (an old buffer's text)
    std::unique_lock lock(mu);
    if (const auto it = file_ids.find(path); it != file_ids.end()) drop_file_locked(it->second);
  };
  if (!overlay) {
    if (!stat_file(path, size, mtime)) return gone();
    if (size > opt.max_file_bytes) return count(&IndexStats::skipped_large);
    if (!read_all(path, disk, opt.max_file_bytes)) return gone();
    size = disk.size();
  }
  const std::string_view text = overlay ? std::string_view(*overlay) : std::string_view(disk);
  if (overlay && text.size() > opt.max_file_bytes) return count(&IndexStats::skipped_large);
  if (text.substr(0, 8192).find('\0') != std::string_view::npos) return count(&IndexStats::skipped_binary);
  if (looks_generated(name_of(path), text)) return count(&IndexStats::skipped_generated);

  std::vector<Piece> pieces = analyse(text);
  std::unique_lock lock(mu);
  if (chunks.size() + pieces.size() >= Posting::kMaxChunks) {  // 67 M chunk ids used: a new walk starts at 0
    spdlog::warn("index: out of chunk ids; {} is left out until the next walk", path);
    return;
  }
  uint32_t id;
  if (const auto it = file_ids.find(path); it != file_ids.end()) {
    id = it->second;
    if (files[id].alive) drop_file_locked(id);
  } else {
    id = uint32_t(files.size());
    files.emplace_back();
    file_ids.emplace(path, id);
  }
  ++version;
  File& f = files[id];
  f = File{path, rel, root, uint32_t(chunks.size()), uint32_t(pieces.size()), size, mtime, overlay, true};
  ++live_files;
  live_bytes += text.size();
  for (Piece& p : pieces) {
    const uint32_t cid = uint32_t(chunks.size());
    chunks.push_back({id, p.begin, p.end, p.length, true});
    ++live_chunks;
    total_length += p.length;
    for (auto& [term, n] : p.tf) {
      auto [t, fresh] = term_ids.try_emplace(std::move(term), uint32_t(postings.size()));
      if (fresh) postings.emplace_back();
      postings[t->second].push_back({cid, n});
      ++n_postings;
    }
    for (auto& [name, off] : p.names) defs[name].push_back({cid, off});
  }
}

void WorkspaceIndex::Impl::drop_file_locked(uint32_t id) {
  File& f = files[id];
  if (!f.alive) return;
  ++version;
  for (uint32_t c = f.first_chunk; c < f.first_chunk + f.n_chunks; ++c) {
    chunks[c].alive = false;
    total_length -= chunks[c].length;
  }
  live_chunks -= f.n_chunks;
  dead_chunks += f.n_chunks;
  --live_files;
  live_bytes -= f.overlay ? f.overlay->size() : f.size;
  f.alive = false;
  f.overlay.reset();
  if (dead_chunks > 4096 && dead_chunks > live_chunks) compact_locked();
}

// Postings and definitions of dropped chunks go (chunk ids stay: a dead
// chunk's record is 20 bytes).
void WorkspaceIndex::Impl::compact_locked() {
  n_postings = 0;
  for (auto& list : postings) {
    std::erase_if(list, [&](const Posting& p) { return !chunks[p.chunk()].alive; });
    list.shrink_to_fit();
    n_postings += list.size();
  }
  for (auto it = defs.begin(); it != defs.end();) {
    std::erase_if(it->second, [&](const Def& d) { return !chunks[d.chunk].alive; });
    it = it->second.empty() ? defs.erase(it) : std::next(it);
  }
  dead_chunks = 0;
}

std::string WorkspaceIndex::Impl::chunk_text(const Chunk& c, uint32_t from, uint32_t max_bytes) const {
  const File& f = files[c.file];
  from = std::clamp(from, c.begin, c.end);
  const uint32_t n = std::min(c.end - from, max_bytes);
  if (f.overlay) return f.overlay->size() >= c.end ? f.overlay->substr(from, n) : std::string();
  uint64_t size = 0;
  int64_t mtime = 0;
  if (!stat_file(f.path, size, mtime) || size != f.size || mtime != f.mtime_ns) return {};  // changed: not trusted
  std::string out(n, '\0');
  const int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const ssize_t got = ::pread(fd, out.data(), n, off_t(from));
  ::close(fd);
  if (got != ssize_t(n)) return {};
  return out;
}

uint64_t WorkspaceIndex::Impl::memory_locked() const {
  uint64_t m = files.capacity() * sizeof(File) + chunks.capacity() * sizeof(Chunk);
  for (const File& f : files) m += f.path.capacity() + f.rel.capacity();
  m += file_ids.size() * (sizeof(std::string) + 48);  // node, key, bucket
  for (const auto& [t, id] : term_ids) m += sizeof(std::string) + t.capacity() + 48;
  for (const auto& p : postings) m += sizeof(p) + p.capacity() * sizeof(Posting);
  for (const auto& [n, d] : defs) m += sizeof(std::string) + n.capacity() + 48 + d.capacity() * sizeof(Def);
  return m;
}

IndexStats WorkspaceIndex::stats() const {
  std::shared_lock lock(impl_->mu);
  IndexStats s = impl_->counters;
  s.roots = impl_->opt.roots.size();
  s.files = impl_->live_files;
  s.bytes = impl_->live_bytes;
  s.chunks = impl_->live_chunks;
  s.terms = impl_->term_ids.size();
  s.postings = impl_->n_postings;
  // Summing every container is a pass over the whole index: once per
  // change, not once per moelsp/status (sent on every completion).
  if (impl_->memory_version != impl_->version) {
    impl_->memory_cached = impl_->memory_locked();
    impl_->memory_version = impl_->version.load();
  }
  s.memory_bytes = impl_->memory_cached;
  return s;
}

}  // namespace moelsp::assist
