#include "completion.h"

#include <algorithm>
#include <string_view>

namespace moelsp::assist {

namespace {
std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool is_opener(char c) { return c == '(' || c == '[' || c == '{'; }
bool is_closer(char c) { return c == ')' || c == ']' || c == '}'; }
char opener_of(char closer) { return closer == ')' ? '(' : closer == ']' ? '[' : '{'; }
bool is_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (unsigned char)c >= 0x80;
}
// Characters a repeated unit may consist of without being a loop: indentation,
// comment rulers (`# ------`, `/* ***** */`), Markdown table rules.
bool is_ruler(char c) { return std::string_view(" \t-=#*~_/+.|:<>").find(c) != std::string_view::npos; }

// A repetition loop inside one line: some unit of p characters written over
// and over. A run of r positions where line[j] == line[j + p] means the unit
// line[j0, j0 + p) repeats (r + p) / p times. O(length × kMaxPeriod).
bool line_loops(std::string_view line) {
  constexpr size_t kMaxPeriod = 32;
  for (size_t p = 1; p <= kMaxPeriod && 2 * p <= line.size(); ++p) {
    size_t run = 0;
    for (size_t j = 0; j + p < line.size(); ++j) {
      run = line[j] == line[j + p] ? run + 1 : 0;
      if (run == 0) continue;
      const size_t reps = (run + p) / p, j0 = j + 1 - run;
      const std::string_view unit = line.substr(j0, p);
      if (std::all_of(unit.begin(), unit.end(), is_ruler)) continue;
      // Numbers repeat digits legitimately (`1000000007`, `0xFFFFFFFF`,
      // `0, 0, 0` tables) for a while; anything else is a loop after a few copies.
      const bool numeric = std::all_of(unit.begin(), unit.end(), [](char c) {
        return std::string_view("0123456789abcdefABCDEFxX.,_ ").find(c) != std::string_view::npos;
      });
      const size_t span = reps * p;
      const bool loop = numeric  ? reps >= 16
                        : p == 1 ? reps >= 8
                                 : (reps >= 4 && span >= 16) || (reps >= 5 && span >= 12);
      if (loop) return true;
    }
  }
  return false;
}

// Brackets a line opens and does not close itself.
int net_openers(std::string_view line) {
  int depth = 0;
  for (char c : line) depth += is_opener(c) ? 1 : is_closer(c) ? -1 : 0;
  return depth;
}

// The brackets the text before the cursor left open, innermost last. Quotes
// end at the line's end (a stray apostrophe in a comment must not swallow the
// rest), and a line whose `'` never closes is read again with `'` as a plain
// character (Rust lifetimes `&'a str`, C++14 `1'000'000`).
std::string open_brackets(const std::string& prefix) {
  std::string stack;
  const auto scan_line = [&stack](std::string_view line, bool apostrophe_quotes) {
    char quote = 0;
    for (size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (quote) {
        if (c == '\\') ++i;
        else if (c == quote) quote = 0;
      } else if (c == '"' || c == '`' || (c == '\'' && apostrophe_quotes)) quote = c;
      else if (is_opener(c)) stack += c;
      else if (is_closer(c) && !stack.empty() && stack.back() == opener_of(c)) stack.pop_back();
    }
    return quote;
  };
  for (size_t p = 0; p < prefix.size();) {
    const size_t nl = std::min(prefix.find('\n', p), prefix.size());
    const std::string_view line = std::string_view(prefix).substr(p, nl - p);
    const std::string before = stack;
    if (scan_line(line, true) == '\'') {
      stack = before;
      scan_line(line, false);
    }
    p = nl + 1;
  }
  return stack;
}
}  // namespace

namespace {

// A text's lines: [start, end) without the '\n'; `whole` when ended by '\n'.
struct Line {
  size_t start, end;
  bool whole;
};
std::vector<Line> split_lines(const std::string& text) {
  std::vector<Line> lines;
  for (size_t p = 0; p <= text.size();) {
    const size_t nl = text.find('\n', p);
    if (nl == std::string::npos) {
      if (p < text.size()) lines.push_back({p, text.size(), false});
      break;
    }
    lines.push_back({p, nl, true});
    p = nl + 1;
  }
  return lines;
}

// Punctuation noise: no word at all in what should be code. Brackets and
// `;` `,` do not count (`});\n});` closes blocks), nor do rulers (`# ----`).
bool punctuation_noise(const std::string& text) {
  size_t noise = 0;
  bool word = false;
  for (char c : text) {
    word = word || is_alnum(c);
    noise += !is_ruler(c) && !is_opener(c) && !is_closer(c) && c != ';' && c != ',' && c != '\n' && c != '\r';
  }
  return !word && noise >= 7;
}

}  // namespace

size_t degenerate_at(const std::string& text, bool complete_lines_only) {
  const std::vector<Line> lines = split_lines(text);
  // Lines judged by every rule; a last line still being written is judged
  // only for loops, which appending more text cannot undo.
  const size_t settled = lines.size() - (complete_lines_only && !lines.empty() && !lines.back().whole ? 1 : 0);
  const auto view = [&](const Line& l) { return std::string_view(text).substr(l.start, l.end - l.start); };
  // Lines compare with their indentation (closing lines `    }`, `  }`, `}`
  // differ only there), except the text's first line when it has none: it
  // starts at the cursor, after indentation that is not in the text.
  const auto rstrip = [&](const Line& l) {
    std::string_view v = view(l);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r')) v.remove_suffix(1);
    return v;
  };
  const auto lstrip = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    return v;
  };
  const auto same_line = [&](size_t a, size_t b) {
    const bool at_cursor =
        a == 0 && !view(lines[0]).empty() && view(lines[0]).front() != ' ' && view(lines[0]).front() != '\t';
    return at_cursor ? rstrip(lines[a]) == lstrip(rstrip(lines[b])) : rstrip(lines[a]) == rstrip(lines[b]);
  };
  if (punctuation_noise(text)) return 0;
  size_t cut = std::string::npos;
  // A block of B lines written three times in a row: keep the first copy.
  constexpr size_t kMaxBlock = 4;
  for (size_t b = 1; b <= kMaxBlock; ++b) {
    for (size_t i = 0; i + 3 * b <= settled; ++i) {
      bool blank = true, same = true;
      for (size_t k = 0; k < b && same; ++k) {
        blank = blank && lstrip(rstrip(lines[i + k])).empty();
        same = same_line(i + k, i + b + k) && same_line(i + k, i + 2 * b + k);
      }
      if (same && !blank) {
        cut = std::min(cut, lines[i + b].start);
        break;
      }
    }
  }
  // A long line written twice in a row: code rarely does that, loops do.
  constexpr size_t kLongLine = 24;
  for (size_t i = 0; i + 2 <= settled && lines[i + 1].start < cut; ++i)
    if (lstrip(rstrip(lines[i])).size() >= kLongLine && same_line(i, i + 1)) {
      cut = lines[i + 1].start;
      break;
    }
  // A loop or a runaway of openers inside a line: drop that whole line.
  for (size_t i = 0; i < lines.size() && lines[i].start < cut; ++i) {
    if (line_loops(view(lines[i])) || (i < settled && net_openers(view(lines[i])) >= 4)) {
      cut = lines[i].start;
      break;
    }
  }
  return cut;
}

namespace {

// The anchor line the prefix starts at: the earliest line whose number is a
// multiple of kAnchorLines and that lies within max_prefix bytes of the
// cursor — or, when none does, the last one before the cursor. While the
// user types, the start stays put (it moves only when the budget forces a
// jump of kAnchorLines lines), so the prompt grows only at its end and the
// engine reuses the KV cache of everything before the cursor.
size_t anchor_begin(std::string_view text, size_t cursor, size_t max_prefix) {
  size_t last = 0, line = 0;
  if (cursor <= max_prefix) return 0;
  for (size_t i = text.find('\n'); i != std::string_view::npos && i < cursor; i = text.find('\n', i + 1)) {
    if (++line % kAnchorLines != 0) continue;
    last = i + 1;
    if (cursor - last <= max_prefix) return last;
  }
  return last;
}

// The suffix's end: at most max_suffix bytes, cut after a whole line where
// one ends in them.
size_t suffix_end(std::string_view text, size_t cursor, size_t max_suffix) {
  size_t end = std::min(text.size(), cursor + max_suffix);
  if (end < text.size()) {
    const size_t nl = text.rfind('\n', end);
    if (nl != std::string_view::npos && nl > cursor) end = nl + 1;
  }
  return end;
}

}  // namespace

Excerpt excerpt_bounds(std::string_view text, size_t cursor, size_t max_prefix, size_t max_suffix) {
  cursor = std::min(cursor, text.size());
  return {anchor_begin(text, cursor, max_prefix), suffix_end(text, cursor, max_suffix)};
}

CompletionContext make_context(std::string_view text, size_t cursor, size_t max_prefix, size_t max_suffix,
                               bool starts_document) {
  cursor = std::min(cursor, text.size());
  CompletionContext c;
  size_t begin = anchor_begin(text, cursor, max_prefix);
  if (cursor - begin > max_prefix) {  // one huge line: fall back to a byte cut at a line start
    begin = cursor - max_prefix;
    const size_t nl = text.find('\n', begin);
    if (nl != std::string_view::npos && nl < cursor) begin = nl + 1;
  }
  c.prefix = std::string(text.substr(begin, cursor - begin));
  c.prefix_whole = begin == 0 && starts_document;
  c.suffix = std::string(text.substr(cursor, suffix_end(text, cursor, max_suffix) - cursor));
  const size_t eol = c.suffix.find('\n');
  c.single_line = !trim(c.suffix.substr(0, eol)).empty();
  return c;
}

namespace {

// ctx.repo's tokens, at most `cap` of them (0: no cap), whole snippets
// dropped from the first. Each snippet is encoded on its own, so one
// snippet's tokens never depend on its neighbours'.
std::vector<TokenId> context_tokens(const Tokenizer& tok, const RepoContext& repo, bool fim, size_t cap) {
  if (repo.empty()) return {};
  const TokenId name = tok.find("<|repo_name|>"), sep = tok.find("<|file_sep|>");
  const bool repo_format = fim && name != kNoToken && sep != kNoToken;
  std::vector<std::vector<TokenId>> parts;
  for (const Snippet& s : repo.snippets) {
    std::string text = s.text;
    if (!text.empty() && text.back() != '\n') text += '\n';
    if (repo_format) {
      parts.push_back({sep});
      const auto t = tok.encode(s.path + "\n" + text);
      parts.back().insert(parts.back().end(), t.begin(), t.end());
    } else {
      parts.push_back(tok.encode(std::string(comment_prefix(repo.path)) + " " + s.path + "\n" + text));
    }
  }
  std::vector<TokenId> head, tail;
  if (repo_format) {
    head.push_back(name);
    const auto r = tok.encode(repo.repo + "\n");
    head.insert(head.end(), r.begin(), r.end());
    tail.push_back(sep);
    const auto p = tok.encode(repo.path + "\n");
    tail.insert(tail.end(), p.begin(), p.end());
  }
  size_t total = head.size() + tail.size(), first = 0;
  for (const auto& p : parts) total += p.size();
  while (cap > 0 && total > cap && first < parts.size()) total -= parts[first++].size();
  if (first == parts.size()) return {};
  std::vector<TokenId> out = head;
  for (size_t i = first; i < parts.size(); ++i) out.insert(out.end(), parts[i].begin(), parts[i].end());
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

}  // namespace

std::vector<TokenId> fim_prompt(const Tokenizer& tok, const CompletionContext& ctx, size_t max_tokens, FimOrder order,
                                std::string* heal, size_t max_local) {
  const SpecialTokens& s = tok.special();
  const bool fim = s.fim_pre != kNoToken && s.fim_suf != kNoToken && s.fim_mid != kNoToken;
  const bool bos = s.add_bos && s.bos != kNoToken;
  // Code is plain text: special-token look-alikes in it are not parsed.
  std::vector<TokenId> prefix = tok.encode(ctx.prefix), suffix = fim ? tok.encode(ctx.suffix) : std::vector<TokenId>{};
  if (heal) {
    heal->clear();
    if (prefix.size() > 1 && is_word_char(ctx.prefix.back())) {
      const std::string last = tok.piece(prefix.back());
      const bool ends = ctx.prefix.size() >= last.size() &&
                        ctx.prefix.compare(ctx.prefix.size() - last.size(), last.size(), last) == 0;
      if (ends && !last.empty() && std::all_of(last.begin(), last.end(), is_word_char)) {
        *heal = last;
        prefix.pop_back();
      }
    }
  }
  std::vector<TokenId> context = context_tokens(tok, ctx.repo, fim, max_tokens > 0 ? max_tokens / 2 : 0);
  if (max_tokens > 0) {
    const size_t fixed = (bos ? 1 : 0) + (fim ? 3 : 0) + context.size();
    size_t room = max_tokens > fixed ? max_tokens - fixed : 0;
    if (max_local > 0) room = std::min(room, max_local);
    if (suffix.size() > room / 4 && prefix.size() + suffix.size() > room)
      suffix.resize(std::max(room / 4, room > prefix.size() ? room - prefix.size() : 0));
    if (prefix.size() + suffix.size() > room) {  // the head goes in steps (kPrefixCutStep's comment)
      size_t drop = prefix.size() - (room - suffix.size());
      drop = std::min(prefix.size(), (drop + kPrefixCutStep - 1) / kPrefixCutStep * kPrefixCutStep);
      prefix.erase(prefix.begin(), prefix.begin() + long(drop));
    }
  }
  std::vector<TokenId> out;
  if (bos) out.push_back(s.bos);
  out.insert(out.end(), context.begin(), context.end());
  if (!fim) {
    out.insert(out.end(), prefix.begin(), prefix.end());
    return out;
  }
  const bool spm = order == FimOrder::kSpm || (order == FimOrder::kModel && s.fim_spm);
  if (spm) out.insert(out.end(), {s.fim_pre, s.fim_suf});
  else {
    out.push_back(s.fim_pre);
    out.insert(out.end(), prefix.begin(), prefix.end());
    out.push_back(s.fim_suf);
  }
  out.insert(out.end(), suffix.begin(), suffix.end());
  out.push_back(s.fim_mid);
  if (spm) out.insert(out.end(), prefix.begin(), prefix.end());
  return out;
}

size_t line_end_at(const std::string& text, const CompletionContext& ctx) {
  const size_t line_start = ctx.prefix.rfind('\n') + 1;  // npos + 1 == 0
  if (ctx.single_line || trim(ctx.prefix.substr(line_start)).empty()) return std::string::npos;
  const size_t nl = text.find('\n');
  if (nl == std::string::npos || nl == 0) return nl;
  const size_t last = text.find_last_not_of(" \t\r", nl - 1);  // npos: a blank first line
  const bool opens = last != std::string::npos && std::string_view(":{([,\\").find(text[last]) != std::string::npos;
  return opens ? std::string::npos : nl;
}

namespace {

// A line that starts a definition at the top level, in the languages people
// complete in (Python, Rust, Go, JavaScript/TypeScript, C-family, Ruby).
bool starts_definition(std::string_view line) {
  static constexpr std::string_view kWords[] = {"def ",  "class ",    "async ",     "@",       "fn ",     "pub ",
                                                "func ", "function ", "export ",    "struct ", "impl ",   "trait ",
                                                "enum ", "type ",     "interface ", "module ", "template"};
  for (std::string_view w : kWords)
    if (line.substr(0, w.size()) == w) return true;
  return false;
}

}  // namespace

size_t block_end_at(const std::string& text, const CompletionContext& ctx) {
  if (ctx.single_line) return std::string::npos;
  const std::string_view cur = std::string_view(ctx.prefix).substr(ctx.prefix.rfind('\n') + 1);  // npos + 1 == 0
  const size_t base = std::min(cur.size(), cur.find_first_not_of(" \t"));  // the statement's indentation
  bool decorated = text.starts_with('@');  // the line before was a decorator: this definition is its
  for (size_t nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', nl + 1)) {
    const size_t end = text.find('\n', nl + 1);
    const std::string_view line =
        std::string_view(text).substr(nl + 1, end == std::string::npos ? std::string::npos : end - nl - 1);
    const size_t indent = line.find_first_not_of(" \t\r");
    if (indent == std::string::npos) continue;  // blank, or not yet known
    if (indent < base || (base == 0 && indent == 0 && !decorated && starts_definition(line))) return nl;
    decorated = indent == 0 && line.starts_with('@');
  }
  return std::string::npos;
}

namespace {

// Indentation and retyping at the cursor's line: when the cursor already
// stands after the line's indentation, a completion that starts with
// whitespace would indent twice; after code on the line, the model may
// start the line over.
void fit_to_cursor_line(std::string& out, const CompletionContext& ctx) {
  const size_t line_start = ctx.prefix.rfind('\n') + 1;  // npos + 1 == 0
  const std::string cur_line = ctx.prefix.substr(line_start);
  const std::string typed = trim(cur_line);  // code before the cursor on its line
  if (!cur_line.empty() && typed.empty()) {
    const size_t first = out.find_first_not_of(" \t");
    if (first != std::string::npos && first > 0 && out[first] != '\n') out.erase(0, first);
    return;
  }
  if (typed.empty()) return;
  // After `    return ` the model writes `    return 0`: keep what continues
  // the line (`0`). A suggestion that opens with indentation but retypes
  // nothing was meant for a line of its own, which an insertion at the
  // cursor cannot start: drop it. A retype is at least three characters of
  // the line, or the whole line with its indentation: `_` + `_init__` and
  // `/` + `/ TODO` are continuations.
  const size_t first = out.find_first_not_of(" \t");
  const std::string line_t = cur_line.substr(0, cur_line.find_last_not_of(" \t") + 1);
  const bool retyped =
      first != std::string::npos && out.compare(first, typed.size(), typed) == 0 &&
      (typed.size() >= 3 || (line_t.size() > typed.size() && out.compare(0, line_t.size(), line_t) == 0));
  const char last = typed.back();
  if (retyped) {
    out.erase(0, first + typed.size());
    if (cur_line.back() == ' ' || cur_line.back() == '\t')
      out.erase(0, std::min(out.size(), out.find_first_not_of(" \t")));
  } else if (first != std::string::npos && first >= 4 && out[first] != '\n' && (last == ':' || last == '{')) {
    out.clear();  // after a block's header, indented text was meant for the next line
  }
}

// The first non-blank line of `text`, trimmed ("" when none).
std::string first_nonblank_line(const std::string& text) {
  for (size_t p = 0; p < text.size();) {
    const size_t nl = text.find('\n', p);
    const std::string line = trim(text.substr(p, nl == std::string::npos ? std::string::npos : nl - p));
    if (!line.empty()) return line;
    if (nl == std::string::npos) break;
    p = nl + 1;
  }
  return "";
}

// Stop where the completion runs into the code after the cursor: a single
// line ends at its newline and before a tail that retypes the rest of the
// cursor's line; a multi-line one before the first generated line that
// repeats the next non-blank line after the cursor.
void stop_at_following_code(std::string& out, const CompletionContext& ctx) {
  if (ctx.single_line) {
    const size_t nl = out.find('\n');
    if (nl != std::string::npos) out.resize(nl);
    const std::string rest_t = trim(ctx.suffix.substr(0, ctx.suffix.find('\n')));
    if (!rest_t.empty()) {
      const size_t at = out.find(rest_t);
      if (at != std::string::npos) out.resize(at);
    }
    return;
  }
  const std::string next = first_nonblank_line(ctx.suffix);
  if (next.empty()) return;
  for (size_t p = 0; p < out.size();) {
    const size_t nl = out.find('\n', p);
    const std::string line = trim(out.substr(p, nl == std::string::npos ? std::string::npos : nl - p));
    if (p > 0 && line == next) {
      out.resize(p);
      return;
    }
    if (nl == std::string::npos) return;
    p = nl + 1;
  }
}

// Unbalanced closers: cut before a closer with no opener in the completion
// when the text after the cursor already closes it, or when nothing before
// the cursor opened it either.
void cut_unbalanced_closers(std::string& out, const CompletionContext& ctx) {
  std::string open = open_brackets(ctx.prefix);
  const std::string rest_of_line = trim(ctx.suffix.substr(0, ctx.suffix.find('\n')));
  int depth = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const char ch = out[i];
    if (is_opener(ch)) ++depth;
    else if (is_closer(ch)) {
      if (depth > 0) {
        --depth;
        continue;
      }
      // With the document's top cut off, the opener may lie above the window.
      const bool suffix_closes = rest_of_line.find(ch) != std::string::npos;
      const bool unopened = open.empty() ? ctx.prefix_whole : open.back() != opener_of(ch);
      if (suffix_closes || unopened) {
        out.resize(i);
        return;
      }
      if (!open.empty()) open.pop_back();
    }
  }
}

}  // namespace

std::string postprocess(const std::string& raw, const CompletionContext& ctx) {
  std::string out = raw;
  if (const size_t end = line_end_at(out, ctx); end != std::string::npos) out.resize(end);
  if (const size_t end = block_end_at(out, ctx); end != std::string::npos) out.resize(end);
  fit_to_cursor_line(out, ctx);
  // Repetition loops, runaway brackets, punctuation noise: back to the last
  // whole line before them (nothing, when that is the first).
  if (const size_t bad = degenerate_at(out); bad != std::string::npos) out.resize(bad);
  stop_at_following_code(out, ctx);
  cut_unbalanced_closers(out, ctx);
  // The cuts above can leave a line that is now the third copy, or a line
  // whose closers were cut: judge once more.
  if (const size_t bad = degenerate_at(out); bad != std::string::npos) out.resize(bad);
  while (!out.empty() && (out.back() == ' ' || out.back() == '\t' || out.back() == '\n' || out.back() == '\r'))
    out.pop_back();
  return out;
}

}  // namespace moelsp::assist
