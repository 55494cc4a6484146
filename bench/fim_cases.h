// The fill-in-the-middle benchmark's cases and metrics (bench/bench_fim.cpp,
// checked by tests/test_fim_cases.cpp).
//
// A case is a held-out source file with a piece cut out where an editor's
// cursor would be, and that piece (the "middle") as the answer:
// - single-line: the rest of a line inside a function body, cut at a point
//   past its indentation (the user typed the line's start and paused);
// - multi-line: the whole body of a block (`if …:`, `for …:`, `def …:`, …)
//   of 2-8 lines, the cursor after the first body line's indentation (where
//   an editor puts it after the header's newline).
// Candidates are every such place in the files; a fixed number of each kind
// is drawn by a Fisher-Yates shuffle driven by std::mt19937 (whose output the
// standard fixes), so the same files give the same cases everywhere.
//
// Metrics, each a mean over cases: exact match (the whole suggestion equals
// the middle, trailing whitespace aside), first-line exact match (their first
// lines do), and edit similarity (1 − Levenshtein distance / the longer
// length, in bytes; 1 for two empty strings).
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace moelsp::bench {

struct FimCase {
  std::string file;      // its name
  std::string document;  // the file with the middle cut out
  size_t cursor = 0;     // where the middle was, in `document`
  std::string middle;
  bool multi_line = false;
};

namespace fim_detail {

struct Line {
  size_t begin = 0, end = 0;  // [begin, end) without the '\n'
  int indent = 0;             // leading spaces (-1: blank)
};

inline std::vector<Line> split_lines(std::string_view t) {
  std::vector<Line> out;
  for (size_t b = 0; b < t.size();) {
    size_t e = t.find('\n', b);
    if (e == std::string_view::npos) e = t.size();
    Line l{b, e, 0};
    while (b + size_t(l.indent) < e && t[b + size_t(l.indent)] == ' ') ++l.indent;
    if (b + size_t(l.indent) == e) l.indent = -1;
    out.push_back(l);
    b = e + 1;
  }
  return out;
}

inline bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

inline std::string_view trim_right(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// A uniform index below n from the generator, the same on every platform
// (std::uniform_int_distribution's algorithm is the library's choice).
inline size_t draw(std::mt19937& g, size_t n) { return size_t(g() % uint32_t(n)); }

template <class T>
void shuffle(std::vector<T>& v, std::mt19937& g) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[draw(g, i)]);
}

}  // namespace fim_detail

// Single-line and multi-line cases from `files` (name, text): n_line and
// n_block of them (fewer when the files have fewer places).
inline std::vector<FimCase> make_fim_cases(const std::vector<std::pair<std::string, std::string>>& files, size_t n_line,
                                           size_t n_block, uint32_t seed = 20261203) {
  using namespace fim_detail;
  struct Place {
    size_t file, cut_begin, cut_end;
    bool multi;
  };
  std::vector<Place> lines, blocks;
  std::mt19937 g(seed);
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string_view t = files[f].second;
    const std::vector<Line> ls = split_lines(t);
    // Headers of the blocks around each line: (indent, is a def).
    std::vector<std::pair<int, bool>> open;
    bool in_string = false;  // inside a triple-quoted string (docstrings): not code
    for (size_t i = 0; i < ls.size(); ++i) {
      const Line& l = ls[i];
      const std::string_view text = t.substr(l.begin, l.end - l.begin);
      const std::string_view code = l.indent >= 0 ? text.substr(size_t(l.indent)) : std::string_view();
      size_t quotes = 0;
      for (size_t p = text.find("\"\"\""); p != std::string_view::npos; p = text.find("\"\"\"", p + 3)) ++quotes;
      for (size_t p = text.find("'''"); p != std::string_view::npos; p = text.find("'''", p + 3)) ++quotes;
      const bool was_string = in_string;
      if (quotes % 2) in_string = !in_string;
      if (l.indent < 0 || was_string || quotes) continue;
      while (!open.empty() && open.back().first >= l.indent) open.pop_back();
      const bool in_def = std::any_of(open.begin(), open.end(), [](const auto& h) { return h.second; });
      const bool comment = starts_with(code, "#"),
                 header = trim_right(code).size() > 0 && trim_right(code).back() == ':';
      // Single-line: a statement in a function body, 12-100 characters; the
      // cut leaves at least 2 characters typed and 3 to complete.
      if (in_def && !comment && !header && code.size() >= 12 && code.size() <= 100 && !starts_with(code, "@")) {
        const size_t start = l.begin + size_t(l.indent) + 2, last = l.end - 3;
        lines.push_back({f, start + draw(g, last - start + 1), l.end, false});
      }
      if (header && !comment) {
        open.push_back({l.indent, starts_with(code, "def ") || starts_with(code, "async def ")});
        // Multi-line: its body, when it is 2-8 lines and at most 500 bytes of plain code.
        size_t j = i + 1, last_code = i;
        int body_indent = -1;
        bool plain = true;
        for (; j < ls.size(); ++j) {
          if (ls[j].indent < 0) continue;
          if (ls[j].indent <= l.indent) break;
          if (body_indent < 0) body_indent = ls[j].indent;
          const std::string_view bt = t.substr(ls[j].begin, ls[j].end - ls[j].begin);
          if (bt.find("\"\"\"") != std::string_view::npos || bt.find("'''") != std::string_view::npos) plain = false;
          last_code = j;
        }
        const size_t n_lines = last_code - i;
        if (plain && n_lines >= 2 && n_lines <= 8 && ls[i + 1].indent == body_indent) {
          const size_t b = ls[i + 1].begin + size_t(body_indent), e = ls[last_code].end;
          if (e - b <= 500) blocks.push_back({f, b, e, true});
        }
      }
    }
  }
  shuffle(lines, g);
  shuffle(blocks, g);
  lines.resize(std::min(lines.size(), n_line));
  blocks.resize(std::min(blocks.size(), n_block));
  std::vector<FimCase> out;
  for (const auto& group : {lines, blocks})
    for (const Place& p : group) {
      const std::string& t = files[p.file].second;
      out.push_back({files[p.file].first, t.substr(0, p.cut_begin) + t.substr(p.cut_end), p.cut_begin,
                     t.substr(p.cut_begin, p.cut_end - p.cut_begin), p.multi});
    }
  return out;
}

// The .py files of `dir` as (name, text), by name (a directory's own order is
// the file system's).
inline std::vector<std::pair<std::string, std::string>> read_fim_files(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".py") {
      std::ifstream in(e.path(), std::ios::binary);
      std::ostringstream ss;
      ss << in.rdbuf();
      files.emplace_back(e.path().filename().string(), ss.str());
    }
  std::sort(files.begin(), files.end());
  return files;
}

inline std::string_view first_line(std::string_view s) { return s.substr(0, s.find('\n')); }

// 1 − Levenshtein(a, b) / max(|a|, |b|), bytes.
inline double edit_similarity(std::string_view a, std::string_view b) {
  if (a.empty() && b.empty()) return 1.0;
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return 1.0 - double(row[b.size()]) / double(std::max(a.size(), b.size()));
}

struct FimScore {
  bool exact = false, first_line_exact = false;
  double edit_similarity = 0;
};

inline FimScore score(std::string_view suggestion, std::string_view middle) {
  using fim_detail::trim_right;
  const std::string_view s = trim_right(suggestion), m = trim_right(middle);
  return {s == m, trim_right(first_line(s)) == trim_right(first_line(m)), edit_similarity(s, m)};
}

}  // namespace moelsp::bench
