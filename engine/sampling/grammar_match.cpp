// The grammar matcher (engine/grammar.h): a set of stacks advanced a byte at
// a time, and the vocabulary mask as a walk over a trie of token pieces.
//
// Performance model of mask(): the walk visits a trie node only when some
// stack admits its byte. A step of the live stacks (a 256-bit test, a copy
// of a short stack, the expansion of the rule that follows) is computed
// once per distinct stack set and byte, then looked up (StepCache): inside
// a JSON string almost every piece is allowed and the walk visits most of
// the trie's ~440k nodes for a 150k vocabulary, a few ns each. The
// scheduler still checks the sampled token first (under a µs) and masks
// only when the grammar rejects it.
#include <algorithm>
#include <array>
#include <numeric>
#include <span>
#include <unordered_map>
#include <unordered_set>

#include "grammar_impl.h"

namespace moelsp {
namespace {

constexpr size_t kMaxStackDepth = 4096;  // deeper nesting than any real output: treated as a dead end
constexpr int kMaxExpandDepth = 2048;    // rules that begin with rules that begin with …: the same
// Per byte step: stacks kept and rule expansions made. Real grammars use a
// few dozen; a hostile one is cut off here (its output may then end early)
// instead of stalling the scheduler.
constexpr size_t kMaxStacks = 4096, kMaxExpansions = 200000;

}  // namespace

// Stacks stored flat: stack i is data[off[i] .. off[i+1]), its top last.
struct StackSet {
  std::vector<uint32_t> data;
  std::vector<uint32_t> off{0};
  std::vector<uint64_t> hashes;

  size_t size() const { return hashes.size(); }
  bool empty() const { return hashes.empty(); }
  std::span<const uint32_t> at(size_t i) const { return {data.data() + off[i], data.data() + off[i + 1]}; }
  void clear() {
    data.clear();
    off.assign(1, 0);
    hashes.clear();
  }
  void add(std::span<const uint32_t> st) {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t x : st) h = (h ^ x) * 1099511628211ull;
    for (size_t i = 0; i < hashes.size(); ++i)
      if (hashes[i] == h && std::ranges::equal(at(i), st)) return;
    hashes.push_back(h);
    data.insert(data.end(), st.begin(), st.end());
    off.push_back(uint32_t(data.size()));
  }
};

// Stack sets seen by mask(), interned, with the set each byte leads to. The
// trie walk meets the same few sets over and over (inside a string every
// ordinary character leads back to the set it came from), so after the
// first visits a step is an array lookup instead of stack copies and rule
// expansions.
struct StepCache {
  static constexpr int32_t kUnknown = -2, kDead = -1;
  // Past kMaxSets a mask starts the cache over; a single mask that meets
  // kOverflow distinct sets (only a grammar that tells apart most of the
  // vocabulary's prefixes) falls back to checking every token alone.
  static constexpr size_t kMaxSets = 4096, kOverflow = 32768;
  std::vector<StackSet> sets;
  std::vector<ByteSet> next_bytes;
  std::vector<std::array<int32_t, 256>> next;
  std::unordered_map<uint64_t, std::vector<int32_t>> by_hash;

  static uint64_t fingerprint(const StackSet& s) {
    uint64_t h = s.size();
    for (uint64_t x : s.hashes) h = (h ^ x) * 1099511628211ull;
    return h;
  }
  void clear() {
    sets.clear();
    next_bytes.clear();
    next.clear();
    by_hash.clear();
  }
};

struct GrammarMatcher::State {
  StackSet cur;
  // Scratch for steps and the mask walk (the matcher serves one request on
  // one thread at a time).
  std::vector<uint32_t> work;
  StackSet tmp_a, tmp_b;
  StepCache cache;
};

namespace {

// One step's expansions: the intermediate stacks already expanded (rules
// that may match nothing in several ways reach the same stack by many paths:
// without this, ("" | ""){60} would take 2^60 expansions) and a budget.
struct Expansion {
  std::unordered_set<uint64_t> seen;
  size_t budget = kMaxExpansions;
};

uint64_t hash_of(const std::vector<uint32_t>& st) {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t x : st) h = (h ^ x) * 1099511628211ull;
  return h;
}

// Expands `st` until its top is a byte set (or it is empty: the sentence is
// complete), adding each result to `out`. Leaves `st` as it found it.
void expand_in(const Grammar& g, std::vector<uint32_t>& st, StackSet& out, Expansion& x, int depth) {
  if (st.empty() || g.elems[st.back()].kind == Grammar::kBytes) {
    if (out.size() < kMaxStacks) out.add(st);
    return;
  }
  if (st.size() > kMaxStackDepth || depth > kMaxExpandDepth || x.budget == 0) return;
  --x.budget;
  if (!x.seen.insert(hash_of(st)).second) return;
  const uint32_t pos = st.back();
  st.pop_back();
  const bool cont = g.elems[pos + 1].kind != Grammar::kEnd;
  if (cont) st.push_back(pos + 1);
  for (uint32_t s : g.alts[g.elems[pos].arg]) {
    if (g.elems[s].kind == Grammar::kEnd) {
      expand_in(g, st, out, x, depth + 1);
    } else {
      st.push_back(s);
      expand_in(g, st, out, x, depth + 1);
      st.pop_back();
    }
  }
  if (cont) st.pop_back();
  st.push_back(pos);
}

void expand(const Grammar& g, std::vector<uint32_t>& st, StackSet& out, Expansion& x) { expand_in(g, st, out, x, 0); }

void step(const Grammar& g, const StackSet& in, uint8_t b, StackSet& out, std::vector<uint32_t>& work) {
  out.clear();
  Expansion x;
  for (size_t i = 0; i < in.size(); ++i) {
    const auto st = in.at(i);
    if (st.empty()) continue;
    const uint32_t pos = st.back();
    if (!has(g.sets[g.elems[pos].arg], b)) continue;
    work.assign(st.begin(), st.end() - 1);
    if (g.elems[pos + 1].kind != Grammar::kEnd) work.push_back(pos + 1);
    expand(g, work, out, x);
  }
}

ByteSet next_bytes(const Grammar& g, const StackSet& s) {
  ByteSet u{};
  for (size_t i = 0; i < s.size(); ++i) {
    const auto st = s.at(i);
    if (st.empty()) continue;
    const ByteSet& b = g.sets[g.elems[st.back()].arg];
    for (int k = 0; k < 4; ++k) u[size_t(k)] |= b[size_t(k)];
  }
  return u;
}

int32_t intern(const Grammar& g, StepCache& c, const StackSet& s) {
  const uint64_t h = StepCache::fingerprint(s);
  auto& same = c.by_hash[h];
  for (int32_t id : same)
    if (c.sets[size_t(id)].data == s.data && c.sets[size_t(id)].off == s.off) return id;
  const auto id = int32_t(c.sets.size());
  c.sets.push_back(s);
  c.next_bytes.push_back(next_bytes(g, s));
  c.next.emplace_back();
  c.next.back().fill(StepCache::kUnknown);
  same.push_back(id);
  return id;
}

int32_t cached_step(const Grammar& g, StepCache& c, int32_t id, uint8_t b, StackSet& tmp, std::vector<uint32_t>& work) {
  int32_t to = c.next[size_t(id)][b];
  if (to != StepCache::kUnknown) return to;
  step(g, c.sets[size_t(id)], b, tmp, work);
  to = tmp.empty() ? StepCache::kDead : intern(g, c, tmp);
  c.next[size_t(id)][b] = to;
  return to;
}

// Advances `from` over `bytes` into `into` (through `spare`); false when a
// byte is rejected.
bool run(const Grammar& g, const StackSet& from, std::string_view bytes, StackSet& into, StackSet& spare,
         std::vector<uint32_t>& work) {
  const StackSet* src = &from;
  StackSet* bufs[2] = {&into, &spare};
  // Ping-pong so that the last step lands in `into`.
  size_t k = bytes.size() % 2 == 1 ? 0 : 1;
  if (bytes.empty()) {
    into = from;
    return !into.empty();
  }
  for (char c : bytes) {
    step(g, *src, uint8_t(c), *bufs[k], work);
    if (bufs[k]->empty()) return false;
    src = bufs[k];
    k ^= 1;
  }
  return true;
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)), s_(std::make_unique<State>()) {
  Expansion x;
  for (uint32_t s : g_->alts[g_->root]) {
    s_->work.clear();
    if (g_->elems[s].kind != Grammar::kEnd) s_->work.push_back(s);
    expand(*g_, s_->work, s_->cur, x);
  }
}

GrammarMatcher::~GrammarMatcher() = default;

GrammarMatcher::GrammarMatcher(const GrammarMatcher& o) : g_(o.g_), s_(std::make_unique<State>()) {
  s_->cur = o.s_->cur;
}

bool GrammarMatcher::accept(std::string_view bytes) {
  if (!run(*g_, s_->cur, bytes, s_->tmp_a, s_->tmp_b, s_->work)) return false;
  std::swap(s_->cur, s_->tmp_a);
  return true;
}

bool GrammarMatcher::can_accept(std::string_view bytes) const {
  return run(*g_, s_->cur, bytes, s_->tmp_a, s_->tmp_b, s_->work);
}

bool GrammarMatcher::accepting() const {
  for (size_t i = 0; i < s_->cur.size(); ++i)
    if (s_->cur.at(i).empty()) return true;
  return false;
}

bool GrammarMatcher::finished() const { return s_->cur.size() == 1 && s_->cur.at(0).empty(); }

bool GrammarMatcher::allows(const VocabTrie& v, int32_t id) const {
  if (v.eog(id)) return accepting();
  const std::string& p = v.piece(id);
  return !p.empty() && can_accept(p);
}

size_t GrammarMatcher::mask(const VocabTrie& v, std::vector<uint8_t>& allowed) const {
  allowed.assign(v.n_vocab(), 0);
  size_t n = 0;
  StepCache& c = s_->cache;
  if (c.sets.size() > StepCache::kMaxSets) c.clear();
  const int32_t start = intern(*g_, c, s_->cur);
  // Depth-first over the trie, each node with the id of the stack set its
  // bytes lead to.
  bool overflow = false;
  const auto walk = [&](auto&& self, uint32_t node, int32_t set) -> void {
    if (c.sets.size() > StepCache::kOverflow) overflow = true;
    if (overflow) return;
    const VocabTrie::Node& nd = v.nodes[node];
    const ByteSet next = c.next_bytes[size_t(set)];  // a copy: interning may grow the vector
    for (uint32_t ch = nd.first_child; ch < nd.first_child + nd.n_children; ++ch) {
      const VocabTrie::Node& child = v.nodes[ch];
      if (!has(next, child.byte)) continue;
      const int32_t to = cached_step(*g_, c, set, child.byte, s_->tmp_a, s_->work);
      if (to == StepCache::kDead) continue;
      for (uint32_t t = child.first_token; t < child.first_token + child.n_tokens; ++t) {
        allowed[size_t(v.token_ids[t])] = 1;
        ++n;
      }
      if (child.n_children > 0) self(self, ch, to);
    }
  };
  walk(walk, 0, start);
  if (overflow) {
    c.clear();
    allowed.assign(v.n_vocab(), 0);
    n = 0;
    for (size_t id = 0; id < v.n_vocab(); ++id)
      if (!v.eog(int32_t(id)) && allows(v, int32_t(id))) {
        allowed[id] = 1;
        ++n;
      }
  }
  if (accepting())
    for (size_t id = 0; id < v.n_vocab(); ++id)
      if (v.eog(int32_t(id))) {
        allowed[id] = 1;
        ++n;
      }
  return n;
}

// ---- the vocabulary trie ----

VocabTrie::VocabTrie(const std::vector<std::string>& pieces, const std::vector<bool>& eog)
    : n_vocab_(pieces.size()), pieces_(pieces), eog_(eog) {
  eog_.resize(n_vocab_, false);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < n_vocab_; ++i)
    if (!eog_[i] && !pieces_[i].empty()) ids.push_back(int32_t(i));
  const auto less = [&](int32_t a, int32_t b) {
    const std::string& x = pieces_[size_t(a)];
    const std::string& y = pieces_[size_t(b)];
    return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end(),
                                        [](char p, char q) { return uint8_t(p) < uint8_t(q); }) ||
           (x == y && a < b);
  };
  std::sort(ids.begin(), ids.end(), less);
  nodes.emplace_back();
  token_ids.reserve(ids.size());
  // build(node, [lo, hi), depth): the ids in range share their first `depth`
  // bytes; those exactly `depth` long sort first and end at this node.
  const auto build = [&](auto&& self, uint32_t node, size_t lo, size_t hi, size_t depth) -> void {
    max_depth = std::max(max_depth, uint32_t(depth));
    size_t i = lo;
    nodes[node].first_token = uint32_t(token_ids.size());
    while (i < hi && pieces_[size_t(ids[i])].size() == depth) token_ids.push_back(ids[i++]);
    nodes[node].n_tokens = uint32_t(token_ids.size()) - nodes[node].first_token;
    std::vector<std::pair<size_t, size_t>> groups;
    while (i < hi) {
      const char b = pieces_[size_t(ids[i])][depth];
      size_t j = i;
      while (j < hi && pieces_[size_t(ids[j])][depth] == b) ++j;
      groups.emplace_back(i, j);
      i = j;
    }
    const auto first = uint32_t(nodes.size());
    nodes[node].first_child = first;
    nodes[node].n_children = uint32_t(groups.size());
    for (const auto& [a, b] : groups) {
      nodes.emplace_back();
      nodes.back().byte = uint8_t(pieces_[size_t(ids[a])][depth]);
    }
    for (size_t k = 0; k < groups.size(); ++k)
      self(self, first + uint32_t(k), groups[k].first, groups[k].second, depth + 1);
  };
  build(build, 0, 0, ids.size(), 0);
}

}  // namespace moelsp
