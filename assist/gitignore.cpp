#include "gitignore.h"

namespace moelsp::assist {

namespace {

// A `[…]` class at p[i] == '['; on a match `i` moves past its `]`. A `[`
// without its `]` is a literal (matched by the caller).
enum class ClassResult { kMatch, kNoMatch, kNotAClass };
ClassResult match_class(std::string_view p, size_t& i, char c) {
  size_t j = i + 1;
  const bool negate = j < p.size() && (p[j] == '!' || p[j] == '^');
  if (negate) ++j;
  bool hit = false;
  for (bool first = true; j < p.size() && (first || p[j] != ']'); first = false) {
    char lo = p[j];
    if (lo == '\\' && j + 1 < p.size()) lo = p[++j];
    char hi = lo;
    if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
      hi = p[j + 2];
      j += 2;
    }
    hit = hit || (c >= lo && c <= hi);
    ++j;
  }
  if (j >= p.size()) return ClassResult::kNotAClass;
  i = j + 1;
  return hit != negate && c != '/' ? ClassResult::kMatch : ClassResult::kNoMatch;
}

}  // namespace

namespace {

// `steps` bounds the backtracking: a pattern such as `*a*a*a*b` against a
// long name would otherwise take exponential time (a repository's
// .gitignore is input we do not control); past it, no match.
bool match(std::string_view p, std::string_view s, int& steps) {
  if (--steps < 0) return false;
  size_t pi = 0, si = 0;
  while (pi < p.size()) {
    const char c = p[pi];
    if (c == '*') {
      const bool across = pi + 1 < p.size() && p[pi + 1] == '*' && (pi == 0 || p[pi - 1] == '/');
      if (across && (pi + 2 == p.size() || p[pi + 2] == '/')) {
        if (pi + 2 == p.size()) return true;             // trailing `/**`: everything below
        const std::string_view rest = p.substr(pi + 3);  // `**/`: zero or more whole components
        if (match(rest, s.substr(si), steps)) return true;
        for (size_t k = si; k < s.size(); ++k)
          if (s[k] == '/' && match(rest, s.substr(k + 1), steps)) return true;
        return false;
      }
      while (pi < p.size() && p[pi] == '*') ++pi;  // `*`, or a `**` inside a component: the same
      const std::string_view rest = p.substr(pi);
      for (size_t k = si;; ++k) {
        if (match(rest, s.substr(k), steps)) return true;
        if (k >= s.size() || s[k] == '/') return false;
      }
    }
    if (si >= s.size()) return false;
    if (c == '?') {
      if (s[si] == '/') return false;
      ++pi, ++si;
      continue;
    }
    if (c == '[') {
      const ClassResult r = match_class(p, pi, s[si]);
      if (r == ClassResult::kNoMatch) return false;
      if (r == ClassResult::kMatch) {
        ++si;
        continue;
      }
    }
    char want = c;
    if (c == '\\' && pi + 1 < p.size()) want = p[++pi];
    if (want != s[si]) return false;
    ++pi, ++si;
  }
  return si == s.size();
}

}  // namespace

bool glob_match(std::string_view pattern, std::string_view path) {
  int steps = 100000;
  return match(pattern, path, steps);
}

std::vector<IgnoreRule> parse_gitignore(std::string_view text) {
  std::vector<IgnoreRule> rules;
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);  // a UTF-8 BOM, as git skips it
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    // Trailing blanks go unless escaped with a backslash.
    while (!line.empty() && line.back() == ' ' && !(line.size() >= 2 && line[line.size() - 2] == '\\'))
      line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    IgnoreRule r;
    if (line.front() == '!') {
      r.negate = true;
      line.remove_prefix(1);
    } else if (line.front() == '\\' && line.size() > 1 && (line[1] == '!' || line[1] == '#')) {
      line.remove_prefix(1);
    }
    if (!line.empty() && line.back() == '/') {
      r.dir_only = true;
      line.remove_suffix(1);
    }
    r.anchored = line.find('/') != std::string_view::npos;
    if (!line.empty() && line.front() == '/') line.remove_prefix(1);
    if (line.empty()) continue;
    r.pattern = std::string(line);
    rules.push_back(std::move(r));
  }
  return rules;
}

bool IgnoreStack::ignored(std::string_view rel, bool is_dir) const {
  const size_t slash = rel.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? rel : rel.substr(slash + 1);
  for (auto f = files_.rbegin(); f != files_.rend(); ++f) {  // the deepest file decides first
    std::string_view local = rel;
    if (!f->base.empty()) {
      if (rel.size() <= f->base.size() || rel.substr(0, f->base.size()) != f->base || rel[f->base.size()] != '/')
        continue;
      local = rel.substr(f->base.size() + 1);
    }
    for (auto r = f->rules.rbegin(); r != f->rules.rend(); ++r) {
      if (r->dir_only && !is_dir) continue;
      if (glob_match(r->pattern, r->anchored ? local : name)) return !r->negate;
    }
  }
  return false;
}

}  // namespace moelsp::assist
