// GBNF (llama.cpp's grammar syntax) → the byte-level rules of grammar_impl.h.
//
//   root  ::= "{" ws members? "}"      rules; literals with \n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH
//   digit ::= [0-9] | [^\x00-\x7f]     classes (^ negates), . any character, ( groups )
//   x     ::= a* b+ c? d{2} e{1,} f{0,3}   repetition; # comments; newlines end a
//                                           rule except inside ( ) and after |
//
// Two passes: a parser to a small tree, then lowering. Lowering turns a
// repetition into right recursion (R ::= item R | ε, and for a bounded
// count nested optionals), which keeps the matcher's stacks flat, and a
// class that reaches beyond ASCII into a rule of UTF-8 byte sequences.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "grammar_impl.h"

namespace moelsp {
namespace {

using Range = std::pair<uint32_t, uint32_t>;  // codepoints, inclusive
constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr int kMaxRepeat = 10000;
constexpr int kMaxNesting = 100;                  // ( groups ) inside each other: the parser recurses
constexpr size_t kMaxElements = size_t(1) << 22;  // the compiled grammar's size (repetition multiplies it)

struct Node {
  enum Type { Alt, Seq, Lit, Class, Ref } type;
  std::vector<Node> kids;     // Alt: sequences; Seq: items
  std::string text;           // Lit: bytes; Ref: rule name
  std::vector<Range> ranges;  // Class: the codepoints it admits (negation applied)
  int min = 1, max = 1;       // repetition; max −1: unbounded
  int line = 0;
};

// ---- parsing ----

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  std::vector<std::pair<std::string, Node>> rules() {
    std::vector<std::pair<std::string, Node>> out;
    space(true);
    while (pos_ < s_.size()) {
      const int line = line_;
      std::string name = word();
      if (name.empty()) fail("expected a rule name");
      space(false);
      if (s_.substr(pos_, 3) != "::=") fail(fmt::format("expected '::=' after '{}'", name));
      pos_ += 3;
      space(true);
      Node body = alternates(false);
      body.line = line;
      if (pos_ < s_.size() && s_[pos_] != '\n' && s_[pos_] != '\r') fail("expected the end of the line");
      out.emplace_back(std::move(name), std::move(body));
      space(true);
    }
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw GrammarError(fmt::format("grammar line {}: {}", line_, what));
  }
  bool at(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  static bool word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  std::string word() {
    const size_t b = pos_;
    while (pos_ < s_.size() && word_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(b, pos_ - b));
  }
  void space(bool newlines) {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t') ++pos_;
      else if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else if ((c == '\n' || c == '\r') && newlines) {
        line_ += c == '\n';
        ++pos_;
      } else break;
    }
  }

  Node alternates(bool nested) {
    Node alt{Node::Alt, {}, {}, {}, 1, 1, line_};
    alt.kids.push_back(sequence(nested));
    while (at('|')) {
      ++pos_;
      space(true);
      alt.kids.push_back(sequence(nested));
    }
    return alt;
  }

  Node sequence(bool nested) {
    Node seq{Node::Seq, {}, {}, {}, 1, 1, line_};
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '|' || c == ')' || c == '\n' || c == '\r') break;
      Node item = atom(nested);
      repetition(item);
      seq.kids.push_back(std::move(item));
      space(nested);
    }
    return seq;
  }

  Node atom(bool /*nested*/) {
    const char c = s_[pos_];
    if (c == '"') {
      ++pos_;
      Node lit{Node::Lit, {}, {}, {}, 1, 1, line_};
      while (!at('"')) {
        if (pos_ >= s_.size() || at('\n')) fail("unterminated string literal");
        append_utf8(lit.text, character());
      }
      ++pos_;
      return lit;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      return Node{Node::Class, {}, {}, {{0, kMaxCodepoint}}, 1, 1, line_};
    }
    if (c == '(') {
      if (++nesting_ > kMaxNesting) fail(fmt::format("groups nested deeper than {}", kMaxNesting));
      ++pos_;
      space(true);
      Node group = alternates(true);
      if (!at(')')) fail("expected ')'");
      ++pos_;
      --nesting_;
      return group;
    }
    if (word_char(c)) return Node{Node::Ref, {}, word(), {}, 1, 1, line_};
    fail(fmt::format("unexpected '{}'", c));
  }

  Node char_class() {
    ++pos_;
    Node cls{Node::Class, {}, {}, {}, 1, 1, line_};
    const bool negated = at('^');
    if (negated) ++pos_;
    std::vector<Range> ranges;
    while (!at(']')) {
      if (pos_ >= s_.size() || at('\n')) fail("unterminated character class");
      const uint32_t lo = character();
      uint32_t hi = lo;
      if (at('-') && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
        ++pos_;
        hi = character();
        if (hi < lo) fail("a character range runs backwards");
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;
    cls.ranges = normalize(std::move(ranges), negated);
    return cls;
  }

  // One character of a literal or class: an escape, or a UTF-8 character.
  uint32_t character() {
    if (s_[pos_] == '\\') {
      if (pos_ + 1 >= s_.size()) fail("a '\\' at the end");
      const char e = s_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^': return uint32_t(e);
        default: fail(fmt::format("unknown escape '\\{}'", e));
      }
    }
    const auto b = uint8_t(s_[pos_]);
    const int n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
    if (n == 0 || pos_ + size_t(n) > s_.size()) fail("invalid UTF-8");
    uint32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (int i = 1; i < n; ++i) cp = (cp << 6) | (uint8_t(s_[pos_ + size_t(i)]) & 0x3F);
    pos_ += size_t(n);
    return cp;
  }

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      if (pos_ >= s_.size()) fail("a short hex escape");
      const char c = s_[pos_];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail("a bad hex digit in an escape");
      v = v * 16 + uint32_t(d);
    }
    if (v > kMaxCodepoint) fail("a character beyond U+10FFFF");
    return v;
  }

  void repetition(Node& item) {
    if (pos_ >= s_.size()) return;
    const char c = s_[pos_];
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      item.min = c == '+' ? 1 : 0;
      item.max = c == '?' ? 1 : -1;
      return;
    }
    if (c != '{') return;
    ++pos_;
    space(false);
    item.min = number();
    item.max = item.min;
    space(false);
    if (at(',')) {
      ++pos_;
      space(false);
      item.max = at('}') ? -1 : number();
      space(false);
    }
    if (!at('}')) fail("expected '}' to close a repetition");
    ++pos_;
    if (item.max != -1 && item.max < item.min) fail("a repetition {m,n} with n < m");
  }

  int number() {
    const size_t b = pos_;
    long v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + (s_[pos_++] - '0');
      if (v > kMaxRepeat) fail(fmt::format("a repetition count above {}", kMaxRepeat));
    }
    if (pos_ == b) fail("expected a number in a repetition");
    return int(v);
  }

 public:
  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) out += char(cp);
    else if (cp < 0x800) out += {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    else if (cp < 0x10000) out += {char(0xE0 | (cp >> 12)), char(0x80 | ((cp >> 6) & 0x3F)), char(0x80 | (cp & 0x3F))};
    else
      out += {char(0xF0 | (cp >> 18)), char(0x80 | ((cp >> 12) & 0x3F)), char(0x80 | ((cp >> 6) & 0x3F)),
              char(0x80 | (cp & 0x3F))};
  }
  // Sorted, merged, surrogates removed; complemented when negated.
  static std::vector<Range> normalize(std::vector<Range> r, bool negated) {
    std::sort(r.begin(), r.end());
    std::vector<Range> m;
    for (const auto& x : r)
      if (!m.empty() && x.first <= m.back().second + 1) m.back().second = std::max(m.back().second, x.second);
      else m.push_back(x);
    if (negated) {
      std::vector<Range> c;
      uint32_t next = 0;
      for (const auto& x : m) {
        if (x.first > next) c.emplace_back(next, x.first - 1);
        next = x.second + 1;
      }
      if (next <= kMaxCodepoint) c.emplace_back(next, kMaxCodepoint);
      m = std::move(c);
    }
    std::vector<Range> out;  // without U+D800..U+DFFF, which UTF-8 never encodes
    for (const auto& x : m) {
      if (x.second < 0xD800 || x.first > 0xDFFF) out.push_back(x);
      else {
        if (x.first < 0xD800) out.emplace_back(x.first, 0xD7FF);
        if (x.second > 0xDFFF) out.emplace_back(0xE000, x.second);
      }
    }
    return out;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  int line_ = 1;
  int nesting_ = 0;
};

// ---- UTF-8 ranges: a codepoint range as byte-range sequences ----

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

int utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
  static constexpr uint32_t kMaxOfLen[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (int n = 1; n < 4; ++n)  // split where the encoding's length changes
    if (lo <= kMaxOfLen[n - 1] && hi > kMaxOfLen[n - 1]) {
      utf8_sequences(lo, kMaxOfLen[n - 1], out);
      utf8_sequences(kMaxOfLen[n - 1] + 1, hi, out);
      return;
    }
  const int n = utf8_len(lo);
  for (int i = 1; i < n; ++i) {  // split until every trailing byte spans its whole range
    const uint32_t m = (uint32_t(1) << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  Parser::append_utf8(a, lo);
  Parser::append_utf8(b, hi);
  ByteRanges seq;
  for (size_t i = 0; i < a.size(); ++i) seq.emplace_back(uint8_t(a[i]), uint8_t(b[i]));
  out.push_back(std::move(seq));
}

// ---- lowering ----

class Lowerer {
 public:
  Grammar& g;
  std::map<std::string, uint32_t> ids;
  std::vector<int> defined_at;  // rule id → line of its definition (0: referenced only)
  std::map<std::string, int> next_suffix;

  uint32_t rule_id(const std::string& name) {
    auto [it, fresh] = ids.emplace(name, uint32_t(g.names.size()));
    if (fresh) {
      g.names.push_back(name);
      g.alts.emplace_back();
      defined_at.push_back(0);
    }
    return it->second;
  }

  uint32_t fresh_rule(const std::string& base) {
    // "~" cannot appear in a GBNF name, so a generated rule never meets a
    // rule the text defines later. From where the last one left off: linear.
    for (int& i = next_suffix[base];;) {
      const std::string name = fmt::format("{}~{}", base, ++i);
      if (!ids.count(name)) return rule_id(name);
    }
  }

  void add_alt(uint32_t rule, const std::vector<Grammar::Elem>& seq) {
    if (g.elems.size() + seq.size() > kMaxElements)
      throw GrammarError(fmt::format("grammar: more than {} elements once its repetitions are expanded", kMaxElements));
    g.alts[rule].push_back(uint32_t(g.elems.size()));
    g.elems.insert(g.elems.end(), seq.begin(), seq.end());
    g.elems.push_back({Grammar::kEnd, 0});
  }

  Grammar::Elem bytes(const ByteSet& s) {
    g.sets.push_back(s);
    return {Grammar::kBytes, uint32_t(g.sets.size() - 1)};
  }

  void define(uint32_t rule, const Node& alt, const std::string& base) {
    for (const Node& seq : alt.kids) add_alt(rule, sequence(seq, base));
  }

  std::vector<Grammar::Elem> sequence(const Node& seq, const std::string& base) {
    std::vector<Grammar::Elem> out;
    for (const Node& item : seq.kids) {
      std::vector<Grammar::Elem> a = atom(item, base);
      if (item.min == 1 && item.max == 1) {
        out.insert(out.end(), a.begin(), a.end());
        continue;
      }
      if (a.size() != 1) {  // repeat one element: wrap the atom in a rule
        const uint32_t r = fresh_rule(base);
        add_alt(r, a);
        a = {{Grammar::kRef, r}};
      }
      if (g.elems.size() + out.size() + size_t(item.min) > kMaxElements)
        throw GrammarError(
            fmt::format("grammar: more than {} elements once its repetitions are expanded", kMaxElements));
      for (int i = 0; i < item.min; ++i) out.push_back(a[0]);
      if (item.max == -1) {
        const uint32_t r = fresh_rule(base);  // r ::= a r | ε
        add_alt(r, {a[0], {Grammar::kRef, r}});
        add_alt(r, {});
        out.push_back({Grammar::kRef, r});
      } else if (item.max > item.min) {
        uint32_t inner = 0;  // opt_k ::= a opt_{k−1} | ε
        for (int k = 1; k <= item.max - item.min; ++k) {
          const uint32_t r = fresh_rule(base);
          if (k == 1) add_alt(r, {a[0]});
          else add_alt(r, {a[0], {Grammar::kRef, inner}});
          add_alt(r, {});
          inner = r;
        }
        out.push_back({Grammar::kRef, inner});
      }
    }
    return out;
  }

  std::vector<Grammar::Elem> atom(const Node& n, const std::string& base) {
    switch (n.type) {
      case Node::Lit: {
        std::vector<Grammar::Elem> out;
        for (char c : n.text) {
          ByteSet s{};
          set_range(s, uint8_t(c), uint8_t(c));
          out.push_back(bytes(s));
        }
        return out;
      }
      case Node::Ref: return {{Grammar::kRef, rule_id(n.text)}};
      case Node::Class: return {char_class(n.ranges, base)};
      case Node::Alt: {
        if (n.kids.size() == 1) return sequence(n.kids[0], base);
        const uint32_t r = fresh_rule(base);
        define(r, n, base);
        return {{Grammar::kRef, r}};
      }
      case Node::Seq: return sequence(n, base);
    }
    return {};
  }

  // ASCII-only: one byte set. Else a rule: the ASCII part as one byte set,
  // each multi-byte range as its byte-range sequences.
  Grammar::Elem char_class(const std::vector<Range>& ranges, const std::string& base) {
    ByteSet ascii{};
    bool wide = false;
    for (const auto& [lo, hi] : ranges) {
      if (lo < 0x80) set_range(ascii, lo, std::min<uint32_t>(hi, 0x7F));
      wide |= hi >= 0x80;
    }
    if (!wide) return bytes(ascii);
    const uint32_t r = fresh_rule(base);
    if (ascii != ByteSet{}) add_alt(r, {bytes(ascii)});
    for (const auto& [lo, hi] : ranges) {
      if (hi < 0x80) continue;
      std::vector<ByteRanges> seqs;
      utf8_sequences(std::max<uint32_t>(lo, 0x80), hi, seqs);
      for (const ByteRanges& seq : seqs) {
        std::vector<Grammar::Elem> elems;
        for (const auto& [a, b] : seq) {
          ByteSet s{};
          set_range(s, a, b);
          elems.push_back(bytes(s));
        }
        add_alt(r, elems);
      }
    }
    return {Grammar::kRef, r};
  }
};

// A rule that can begin with itself (through rules that may match nothing)
// would make the matcher expand forever: refused, naming it. Linear in the
// grammar's size and iterative, so a chain of 100k rules costs neither a
// quadratic fixpoint nor a deep stack.
void check_left_recursion(const Grammar& g) {
  const size_t n = g.alts.size();
  // Nullable rules by a worklist: an alternative is nullable once every
  // element is a reference to a nullable rule.
  std::vector<bool> nullable(n, false);
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> users(n);  // rule → (owner rule, alternative index)
  std::vector<std::vector<int>> left(n);                             // per alternative: elements not yet nullable
  std::vector<uint32_t> work;
  for (uint32_t r = 0; r < n; ++r) {
    left[r].resize(g.alts[r].size());
    for (uint32_t k = 0; k < g.alts[r].size(); ++k) {
      int count = 0;
      bool bytes = false;
      for (uint32_t p = g.alts[r][k]; g.elems[p].kind != Grammar::kEnd; ++p) {
        if (g.elems[p].kind == Grammar::kBytes) bytes = true;
        else users[g.elems[p].arg].emplace_back(r, k);
        ++count;
      }
      left[r][k] = bytes ? -1 : count;
      if (count == 0 && !nullable[r]) {
        nullable[r] = true;
        work.push_back(r);
      }
    }
  }
  while (!work.empty()) {
    const uint32_t r = work.back();
    work.pop_back();
    for (const auto& [owner, k] : users[r])
      if (left[owner][k] > 0 && --left[owner][k] == 0 && !nullable[owner]) {
        nullable[owner] = true;
        work.push_back(owner);
      }
  }
  std::vector<std::vector<uint32_t>> starts(n);  // rules each rule may begin with
  for (size_t r = 0; r < n; ++r)
    for (uint32_t s : g.alts[r])
      for (uint32_t p = s; g.elems[p].kind == Grammar::kRef; ++p) {
        starts[r].push_back(g.elems[p].arg);
        if (!nullable[g.elems[p].arg]) break;
      }
  // Depth-first with an explicit stack: a cycle is an edge back to a rule on the path.
  std::vector<int> mark(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> path;
  for (uint32_t root = 0; root < n; ++root) {
    if (mark[root] != 0) continue;
    mark[root] = 1;
    path.emplace_back(root, 0);
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == starts[r].size()) {
        mark[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t t = starts[r][i++];
      if (mark[t] == 1) throw GrammarError(fmt::format("grammar: rule '{}' is left-recursive", g.names[t]));
      if (mark[t] == 0) {
        mark[t] = 1;
        path.emplace_back(t, 0);
      }
    }
  }
}

}  // namespace

std::shared_ptr<const Grammar> compile_gbnf(std::string_view text, std::string_view root) {
  auto g = std::make_shared<Grammar>();
  g->source = std::string(text);
  Lowerer low{*g, {}, {}, {}};
  Parser parser(text);
  for (auto& [name, body] : parser.rules()) {
    const uint32_t id = low.rule_id(name);
    if (low.defined_at[id] != 0)
      throw GrammarError(fmt::format("grammar line {}: rule '{}' is defined twice (first on line {})", body.line, name,
                                     low.defined_at[id]));
    low.defined_at[id] = body.line;
    low.define(id, body, name);
  }
  for (size_t r = 0; r < g->names.size(); ++r)
    if (g->alts[r].empty() && low.defined_at[r] == 0)
      throw GrammarError(fmt::format("grammar: rule '{}' is used but never defined", g->names[r]));
  const auto it = low.ids.find(std::string(root));
  if (it == low.ids.end() || low.defined_at[it->second] == 0)
    throw GrammarError(fmt::format("grammar: no rule '{}' to start from", root));
  g->root = it->second;
  check_left_recursion(*g);
  return g;
}

const std::string& grammar_source(const Grammar& g) { return g.source; }

}  // namespace moelsp
