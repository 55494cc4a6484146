// What the workspace index offers one cursor (WorkspaceIndex::context_for).
//
// Evidence, strongest first:
// 1. Definitions of the names near the cursor: names on the cursor's line
//    and the three lines above it (nearest first), then the names the file
//    imports, then the other names of the last lines, then the names the
//    whole file uses most (file_names) — each looked up in the table of
//    defined names, skipping names the visible text (or the file) defines
//    itself. A definition's snippet is its signature line (kDefLines; see
//    kIndexDefinitionLines for why), up to two thirds of the budget.
// 2. Chunks similar to the text around the cursor: Okapi BM25 (k1 1.2,
//    b 0.75) of the identifier terms of kQueryLines lines above the cursor
//    (ending at a line whose number is a multiple of 8) and the first lines
//    after it, over all chunks, up to five sixths of the budget: the caller
//    turns tokens into bytes at an estimate, and a context over its token cap
//    loses whole snippets from its head (fim_prompt), the needed definition
//    among them (at a full byte budget 13 of 83 picked definitions were lost
//    that way on the cross-file benchmark).
// Both read only whole identifiers before the word being typed and whole
// lines above the cursor's line, so the picks (and with them the prompt's
// KV prefix) change when a name is finished or every 8 lines, not per
// keystroke.
// Never from the file being completed (its text is the prefix already).
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "assist/completion.h"
#include "assist/workspace_index_impl.h"

namespace moelsp::assist {

namespace {

constexpr size_t kNearLines = 4, kQueryLines = 24, kSuffixLines = 6;
constexpr size_t kDefLines = kIndexDefinitionLines, kDefBytes = kIndexDefinitionBytes, kChunkBytes = 1600;
constexpr size_t kMaxNames = 24, kMaxQueryTerms = 96, kMaxPostings = 200000;

// The last `n` whole lines of `text` before its last (unfinished) line, and
// that last line up to its last whole word.
struct Window {
  std::string_view cursor_line;  // up to the word being typed
  std::string_view above;        // the lines before it
};
Window window_of(std::string_view prefix, size_t n) {
  const size_t line_start = prefix.rfind('\n') + 1;  // npos + 1 == 0
  std::string_view line = prefix.substr(line_start);
  while (!line.empty() && is_word_char(line.back())) line.remove_suffix(1);
  size_t b = line_start;
  for (size_t k = 0; k < n && b > 0; ++k) {
    const size_t nl = prefix.rfind('\n', b >= 2 ? b - 2 : 0);
    b = nl == std::string_view::npos || b < 2 ? 0 : nl + 1;
  }
  return {line, prefix.substr(b, line_start - b)};
}

std::string_view head_lines(std::string_view s, size_t n) {
  size_t e = 0;
  for (size_t k = 0; k < n && e < s.size(); ++k) {
    const size_t nl = s.find('\n', e);
    e = nl == std::string_view::npos ? s.size() : nl + 1;
  }
  return s.substr(0, e);
}

std::string_view tail_lines(std::string_view s, size_t n) { return window_of(s, n).above; }

// The prefix up to the start of its last line whose number is a multiple of
// kQueryStep (the prefix starts at such a line: make_context's anchor). The
// similarity query reads the lines before it, so its picks move every
// kQueryStep lines, not on every new line: each move re-prefills the prompt
// after the first changed snippet, the file's prefix included. (Before
// line kQueryStep: the whole lines above the cursor.)
constexpr size_t kQueryStep = 8;
std::string_view anchored(std::string_view prefix) {
  // Line k starts after the k-th '\n'; the cursor's line is line `lines`.
  const size_t lines = size_t(std::count(prefix.begin(), prefix.end(), '\n'));
  if (lines < kQueryStep) return prefix.substr(0, prefix.rfind('\n') + 1);  // a file's first lines: each line counts
  size_t at = prefix.size();
  for (size_t k = 0; k <= lines % kQueryStep; ++k) {  // back to the '\n' before line lines − lines % kQueryStep
    if (at == 0) return prefix.substr(0, 0);
    at = prefix.rfind('\n', at - 1);
    if (at == std::string_view::npos) return prefix.substr(0, 0);
  }
  return prefix.substr(0, at + 1);
}

// Names in the order of evidence (see the file's comment), without repeats.
std::vector<std::string> names_near(std::string_view prefix, std::string_view suffix) {
  std::vector<std::string> out;
  std::unordered_set<std::string> seen, defined;
  for (std::string_view text : {prefix, suffix})
    for (size_t at = 0; at < text.size();) {  // names the visible text defines need no lookup
      const size_t nl = text.find('\n', at);
      const std::string_view line = text.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
      if (const std::string_view d = defined_name(line); !d.empty()) defined.emplace(d);
      at = nl == std::string_view::npos ? text.size() : nl + 1;
    }
  const auto add = [&](std::string_view n) {
    std::string s(n);
    if (!defined.count(s) && seen.insert(s).second) out.push_back(std::move(s));
  };
  const auto add_reversed = [&](std::string_view text) {  // nearest (last) first
    std::vector<std::string_view> v;
    for_each_name(text, [&](std::string_view n) { v.push_back(n); });
    for (auto it = v.rbegin(); it != v.rend(); ++it) add(*it);
  };
  const Window near = window_of(prefix, kNearLines);
  add_reversed(near.cursor_line);
  add_reversed(near.above);
  for (size_t at = 0; at < prefix.size();) {  // imports: `from m import a, b`, `import {a} from`, `use a::b`
    const size_t nl = prefix.find('\n', at);
    const std::string_view line = prefix.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
    if (line.starts_with("from ") || line.starts_with("import ") || line.starts_with("use ") ||
        line.starts_with("#include") || line.starts_with("const {") || line.starts_with("require"))
      for_each_name(line, add);
    at = nl == std::string_view::npos ? prefix.size() : nl + 1;
  }
  add_reversed(tail_lines(anchored(prefix), kQueryLines));
  for_each_name(head_lines(suffix, kSuffixLines), add);
  if (out.size() > kMaxNames) out.resize(kMaxNames);
  return out;
}

// Names the whole file uses (its text as indexed: the editor's buffer or the
// file on disk) that only other files define, most used first: the name the
// user is about to write at the cursor is often used further down the file,
// beyond the 400 bytes after the cursor that the window holds (on the
// cross-file benchmark this took the definition into the prompt in ~2 % of
// cases without it).
std::vector<std::string> file_names(const WorkspaceIndex::Impl& m, const std::string& path,
                                    const std::vector<std::string>& have) {
  const auto it = m.file_ids.find(path);
  if (it == m.file_ids.end() || !m.files[it->second].alive) return {};
  const uint32_t self = it->second;
  const auto& f = m.files[self];
  std::string disk;
  if (!f.overlay && !read_all(f.path, disk, m.opt.max_file_bytes)) return {};
  const std::string_view text = f.overlay ? std::string_view(*f.overlay) : std::string_view(disk);
  std::unordered_map<std::string_view, int> count;
  for_each_name(text, [&](std::string_view n) { ++count[n]; });
  std::vector<std::pair<int, std::string_view>> ranked;
  for (const auto& [n, c] : count) {
    const auto d = m.defs.find(std::string(n));
    if (d == m.defs.end() || std::find(have.begin(), have.end(), n) != have.end()) continue;
    const bool here = std::any_of(d->second.begin(), d->second.end(), [&](const WorkspaceIndex::Impl::Def& x) {
      return m.chunks[x.chunk].alive && m.chunks[x.chunk].file == self;
    });
    if (!here) ranked.emplace_back(-c, n);
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < ranked.size() && i < kMaxNames; ++i) out.emplace_back(ranked[i].second);
  return out;
}

// Whole lines of `text` from its start, at most `lines` lines and `bytes` bytes.
std::string whole_lines(const std::string& text, size_t lines, size_t bytes) {
  size_t e = 0;
  for (size_t k = 0; k < lines && e < text.size(); ++k) {
    const size_t nl = text.find('\n', e);
    const size_t next = nl == std::string::npos ? text.size() : nl + 1;
    if (next > bytes) break;
    e = next;
  }
  std::string out = text.substr(0, e);
  if (!out.empty() && out.back() != '\n') out += '\n';
  return out;
}

// The chunks most like the text around the cursor, best first (at most 32):
// BM25 over the identifiers of the lines before and after it.
std::vector<std::pair<double, uint32_t>> similar_chunks(const WorkspaceIndex::Impl& m, const ContextQuery& q) {
  std::unordered_map<uint32_t, uint32_t> qtf;  // term id → count in the query
  const std::string_view around[] = {tail_lines(anchored(q.prefix), kQueryLines), head_lines(q.suffix, kSuffixLines)};
  for (std::string_view text : around)
    for_each_term(text, [&](std::string_view t) {
      if (qtf.size() >= kMaxQueryTerms) return;
      if (const auto it = m.term_ids.find(std::string(t)); it != m.term_ids.end()) ++qtf[it->second];
    });
  const double n = double(m.live_chunks), avg = double(m.total_length) / std::max(1.0, n);
  constexpr double k1 = 1.2, b = 0.75;
  // Rarest terms first, and at most kMaxPostings postings visited: the
  // rare terms carry the ranking (idf), the common ones the cost (on
  // /usr/include/boost a query's terms list up to a million postings).
  std::vector<std::pair<size_t, uint32_t>> order;  // (df, term)
  for (const auto& [t, count] : qtf) order.emplace_back(m.postings[t].size(), t);
  std::sort(order.begin(), order.end());
  // Scores in a dense array reused by the thread's queries (one float per
  // chunk; the touched ones are reset after), not a hash map per query.
  thread_local std::vector<float> score;
  thread_local std::vector<uint32_t> touched;
  if (score.size() < m.chunks.size()) score.resize(m.chunks.size(), 0.0f);
  touched.clear();
  size_t visited = 0;
  for (const auto& [df_n, t] : order) {
    const double df = double(df_n);
    if (df > n / 8 + 16 || visited + df_n > kMaxPostings) break;  // in one chunk of eight: says little
    visited += df_n;
    const float idf = float(std::log(1 + (n - df + 0.5) / (df + 0.5)) * std::min(qtf.at(t), 3u));
    for (const WorkspaceIndex::Impl::Posting p : m.postings[t]) {
      const uint32_t id = p.chunk();
      const WorkspaceIndex::Impl::Chunk& c = m.chunks[id];
      if (!c.alive) continue;
      const float tf = float(p.tf());
      if (score[id] == 0.0f) touched.push_back(id);
      score[id] += idf * tf * float(k1 + 1) / (tf + float(k1 * (1 - b + b * double(c.length) / avg)));
    }
  }
  std::vector<std::pair<double, uint32_t>> ranked;
  ranked.reserve(touched.size());
  for (const uint32_t c : touched) {
    ranked.emplace_back(-double(score[c]), c);
    score[c] = 0.0f;
  }
  const size_t top = std::min<size_t>(ranked.size(), 32);
  std::partial_sort(ranked.begin(), ranked.begin() + long(top), ranked.end());
  ranked.resize(top);
  return ranked;
}

// Several files may define a name: the usable definition nearest the
// current file's folder (the longest path prefix shared with `rel`).
template <class Usable>
const WorkspaceIndex::Impl::Def* nearest_definition(const WorkspaceIndex::Impl& m,
                                                    const std::vector<WorkspaceIndex::Impl::Def>& defs,
                                                    const std::string& rel, const Usable& usable) {
  const WorkspaceIndex::Impl::Def* best = nullptr;
  size_t best_shared = 0;
  for (const WorkspaceIndex::Impl::Def& d : defs) {
    if (!usable(d.chunk)) continue;
    const std::string& r = m.files[m.chunks[d.chunk].file].rel;
    const size_t shared = size_t(std::mismatch(r.begin(), r.end(), rel.begin(), rel.end()).first - r.begin());
    if (!best || shared > best_shared) best = &d, best_shared = shared;
  }
  return best;
}

// A snippet chosen for the prompt: from chunk `chunk`, starting at byte `from`.
struct Pick {
  uint32_t chunk, from;
  std::string text;
};

// The query's picks, under the index's read lock.
RepoContext pick_context(const WorkspaceIndex::Impl& m, const ContextQuery& q, const ExcludeList& exclude) {
  using Impl = WorkspaceIndex::Impl;
  RepoContext rc;
  const auto [root, rel] = m.locate(q.path);
  rc.path = rel;
  rc.repo = root >= 0 ? m.opt.roots[size_t(root)].substr(m.opt.roots[size_t(root)].rfind('/') + 1) : "";
  if (q.budget_bytes == 0 || m.live_chunks == 0) return rc;

  std::vector<Pick> picks;
  std::unordered_set<uint32_t> taken;
  size_t used = 0;
  const auto usable = [&](uint32_t c) {
    const Impl::File& f = m.files[m.chunks[c].file];
    return m.chunks[c].alive && f.path != q.path && !taken.count(c) && !exclude.excluded(f.path);
  };
  size_t limit = q.budget_bytes;
  const auto take = [&](uint32_t c, uint32_t from, size_t lines, size_t bytes) {
    const size_t cost = m.files[m.chunks[c].file].rel.size() + 4;  // the snippet's header
    if (used + cost >= limit) return false;
    const std::string text =
        whole_lines(m.chunk_text(m.chunks[c], from, uint32_t(bytes)), lines, std::min(bytes, limit - used - cost));
    if (text.empty()) return false;
    used += text.size() + cost;
    taken.insert(c);
    picks.push_back({c, from, text});
    return true;
  };

  // 1. Definitions of the names near the cursor (up to two thirds of the budget).
  std::vector<std::string> names = names_near(q.prefix, q.suffix);
  for (std::string& n : file_names(m, q.path, names)) names.push_back(std::move(n));
  for (const std::string& name : names) {
    if (used >= q.budget_bytes * 2 / 3) break;
    const auto it = m.defs.find(name);
    if (it == m.defs.end()) continue;
    if (const Impl::Def* best = nearest_definition(m, it->second, rel, usable))
      take(best->chunk, best->offset, kDefLines, kDefBytes);
  }

  // 2. Chunks like the text around the cursor (BM25).
  limit = q.budget_bytes * 5 / 6;  // (see the file's comment)
  if (used < limit)
    for (const auto& [score, c] : similar_chunks(m, q))
      if (used < limit && usable(c)) take(c, m.chunks[c].begin, 64, kChunkBytes);

  // A stable order: by file, then place in it.
  std::sort(picks.begin(), picks.end(), [&](const Pick& a, const Pick& b) {
    const std::string &ra = m.files[m.chunks[a.chunk].file].rel, &rb = m.files[m.chunks[b.chunk].file].rel;
    return ra != rb ? ra < rb : a.from < b.from;
  });
  for (Pick& p : picks) {
    const Impl::File& f = m.files[m.chunks[p.chunk].file];
    rc.snippets.push_back({f.rel, std::move(p.text), f.path});
  }
  return rc;
}

}  // namespace

RepoContext WorkspaceIndex::context_for(const ContextQuery& query, const ExcludeList& exclude) const {
  // Whole words only: the word being typed is not a name yet (see the
  // file's comment), and the memo's key must not move with its letters.
  ContextQuery q = query;
  while (!q.prefix.empty() && is_word_char(q.prefix.back())) q.prefix.remove_suffix(1);
  const Impl& m = *impl_;
  std::shared_lock lock(m.mu);
  std::string globs;
  for (const std::string& g : exclude.globs()) globs.append(g).push_back('\n');
  Impl::QueryKey key{.version = m.version.load(),
                     .budget = q.budget_bytes,
                     .prefix_hash = std::hash<std::string_view>{}(q.prefix),
                     .suffix_hash = std::hash<std::string_view>{}(q.suffix),
                     .path = q.path,
                     .exclude = std::move(globs)};
  {
    std::lock_guard memo_lock(m.memo_mu);
    for (const auto& [k, rc] : m.memo)
      if (k == key) return rc;
  }
  RepoContext rc = pick_context(m, q, exclude);
  std::lock_guard memo_lock(m.memo_mu);
  m.memo.emplace_front(std::move(key), rc);
  if (m.memo.size() > Impl::kMemoEntries) m.memo.pop_back();
  return rc;
}

}  // namespace moelsp::assist
