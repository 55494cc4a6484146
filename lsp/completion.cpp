#include "completion.h"

#include <algorithm>
#include <string_view>

namespace moelsp::lsp {

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
bool is_alnum(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (unsigned char)c >= 0x80; }
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
      const bool loop = p == 1 ? reps >= 8 : reps >= 4 && reps * p >= 16;
      if (!loop) continue;
      const std::string_view unit = line.substr(j0, p);
      if (std::all_of(unit.begin(), unit.end(), is_ruler)) continue;
      return true;
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
// rest), so this over-counts a little in odd cases — which only lets a
// completion keep a closer it might not need.
std::string open_brackets(const std::string& prefix) {
  std::string stack;
  char quote = 0;
  for (size_t i = 0; i < prefix.size(); ++i) {
    const char c = prefix[i];
    if (c == '\n') quote = 0;
    else if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'' || c == '`') quote = c;
    else if (is_opener(c)) stack += c;
    else if (is_closer(c) && !stack.empty() && stack.back() == opener_of(c)) stack.pop_back();
  }
  return stack;
}
}  // namespace

size_t degenerate_at(const std::string& text, bool complete_lines_only) {
  // Lines: [start, end) without the '\n'; `whole` when ended by '\n'.
  struct Line { size_t start, end; bool whole; };
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
  // Lines judged by every rule; a last line still being written is judged
  // only for loops, which appending more text cannot undo.
  const size_t settled = lines.size() - (complete_lines_only && !lines.empty() && !lines.back().whole ? 1 : 0);
  const auto view = [&](const Line& l) { return std::string_view(text).substr(l.start, l.end - l.start); };
  const auto rstrip = [&](const Line& l) {
    std::string_view v = view(l);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r')) v.remove_suffix(1);
    return v;
  };
  // Punctuation noise: no word at all in what should be code (a ruler such
  // as `# -----` excepted).
  size_t visible = 0;
  bool word = false, ruler = true;
  for (char c : text) {
    const bool seen = c != ' ' && c != '\t' && c != '\n' && c != '\r';
    visible += seen;
    word = word || is_alnum(c);
    ruler = ruler && (!seen || is_ruler(c));
  }
  if (!word && !ruler && visible >= 7) return 0;
  size_t cut = std::string::npos;
  // A block of B lines written three times in a row: keep the first copy.
  constexpr size_t kMaxBlock = 4;
  for (size_t b = 1; b <= kMaxBlock; ++b) {
    for (size_t i = 0; i + 3 * b <= settled; ++i) {
      bool blank = true, same = true;
      for (size_t k = 0; k < b && same; ++k) {
        const std::string_view a = rstrip(lines[i + k]);
        blank = blank && trim(std::string(a)).empty();
        same = a == rstrip(lines[i + b + k]) && a == rstrip(lines[i + 2 * b + k]);
      }
      if (same && !blank) {
        cut = std::min(cut, lines[i + b].start);
        break;
      }
    }
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

CompletionContext make_context(const std::string& text, size_t cursor, size_t max_prefix, size_t max_suffix) {
  cursor = std::min(cursor, text.size());
  CompletionContext c;
  // The prefix starts at a line whose number is a multiple of kAnchorLines:
  // while the user types, the start stays put (it moves only when the budget
  // forces a jump of kAnchorLines lines), so the prompt grows only at its end
  // and the engine reuses the KV cache of everything before the cursor.
  constexpr size_t kAnchorLines = 32;
  std::vector<size_t> anchors{0};  // byte offsets of lines 0, 32, 64, ... before the cursor
  size_t line = 0;
  for (size_t i = 0; i < cursor; ++i)
    if (text[i] == '\n' && ++line % kAnchorLines == 0 && i + 1 <= cursor) anchors.push_back(i + 1);
  size_t begin = anchors.back();
  for (size_t a : anchors)
    if (cursor - a <= max_prefix) {
      begin = a;
      break;
    }
  if (cursor - begin > max_prefix) {  // one huge line: fall back to a byte cut at a line start
    begin = cursor - max_prefix;
    const size_t nl = text.find('\n', begin);
    if (nl != std::string::npos && nl < cursor) begin = nl + 1;
  }
  c.prefix = text.substr(begin, cursor - begin);
  size_t end = std::min(text.size(), cursor + max_suffix);
  if (end < text.size()) {
    const size_t nl = text.rfind('\n', end);
    if (nl != std::string::npos && nl > cursor) end = nl + 1;
  }
  c.suffix = text.substr(cursor, end - cursor);
  const size_t eol = c.suffix.find('\n');
  c.single_line = !trim(c.suffix.substr(0, eol)).empty();
  return c;
}

std::vector<TokenId> fim_prompt(const Tokenizer& tok, const CompletionContext& ctx, size_t max_tokens) {
  const SpecialTokens& s = tok.special();
  const bool fim = s.fim_pre != kNoToken && s.fim_suf != kNoToken && s.fim_mid != kNoToken;
  const bool bos = s.add_bos && s.bos != kNoToken;
  // Code is plain text: special-token look-alikes in it are not parsed.
  std::vector<TokenId> prefix = tok.encode(ctx.prefix), suffix = fim ? tok.encode(ctx.suffix) : std::vector<TokenId>{};
  if (max_tokens > 0) {
    const size_t fixed = (bos ? 1 : 0) + (fim ? 3 : 0);
    const size_t room = max_tokens > fixed ? max_tokens - fixed : 0;
    if (suffix.size() > room / 4 && prefix.size() + suffix.size() > room)
      suffix.resize(std::max(room / 4, room > prefix.size() ? room - prefix.size() : 0));
    if (prefix.size() + suffix.size() > room) prefix.erase(prefix.begin(), prefix.end() - long(room - suffix.size()));
  }
  std::vector<TokenId> out;
  if (bos) out.push_back(s.bos);
  if (fim) out.push_back(s.fim_pre);
  out.insert(out.end(), prefix.begin(), prefix.end());
  if (fim) {
    out.push_back(s.fim_suf);
    out.insert(out.end(), suffix.begin(), suffix.end());
    out.push_back(s.fim_mid);
  }
  return out;
}

std::string postprocess(const std::string& raw, const CompletionContext& ctx) {
  std::string out = raw;
  // Indentation: when the cursor already stands after the line's indentation,
  // a completion that starts with whitespace would indent twice.
  const size_t line_start = ctx.prefix.rfind('\n') + 1;  // npos + 1 == 0
  const std::string cur_line = ctx.prefix.substr(line_start);
  if (!cur_line.empty() && cur_line.find_first_not_of(" \t") == std::string::npos) {
    const size_t first = out.find_first_not_of(" \t");
    if (first != std::string::npos && first > 0 && out[first] != '\n') out.erase(0, first);
  }
  // Repetition loops, runaway brackets, punctuation noise: back to the last
  // whole line before them (nothing, when that is the first).
  if (const size_t bad = degenerate_at(out); bad != std::string::npos) out.resize(bad);
  if (ctx.single_line) {
    const size_t nl = out.find('\n');
    if (nl != std::string::npos) out.resize(nl);
    // Drop a tail that merely retypes what already follows the cursor.
    const std::string rest = ctx.suffix.substr(0, ctx.suffix.find('\n'));
    const std::string rest_t = trim(rest);
    if (!rest_t.empty()) {
      const size_t at = out.find(rest_t);
      if (at != std::string::npos) out.resize(at);
    }
  } else {
    // Multi-line: stop at the first generated line that repeats the next
    // non-blank line after the cursor.
    std::string next;
    for (size_t p = 0; p < ctx.suffix.size();) {
      const size_t nl = ctx.suffix.find('\n', p);
      const std::string line = trim(ctx.suffix.substr(p, nl == std::string::npos ? std::string::npos : nl - p));
      if (!line.empty()) {
        next = line;
        break;
      }
      if (nl == std::string::npos) break;
      p = nl + 1;
    }
    if (!next.empty()) {
      size_t p = 0;
      while (p < out.size()) {
        const size_t nl = out.find('\n', p);
        const std::string line = trim(out.substr(p, nl == std::string::npos ? std::string::npos : nl - p));
        if (p > 0 && line == next) {
          out.resize(p);
          break;
        }
        if (nl == std::string::npos) break;
        p = nl + 1;
      }
    }
  }
  // Unbalanced closers: cut before a closer with no opener in the completion
  // when the text after the cursor already closes it, or when nothing before
  // the cursor opened it either.
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
      const bool suffix_closes = rest_of_line.find(ch) != std::string::npos;
      if (suffix_closes || open.empty() || open.back() != opener_of(ch)) {
        out.resize(i);
        break;
      }
      open.pop_back();
    }
  }
  // The cuts above can leave a line that is now the third copy, or a line
  // whose closers were cut: judge once more.
  if (const size_t bad = degenerate_at(out); bad != std::string::npos) out.resize(bad);
  while (!out.empty() && (out.back() == ' ' || out.back() == '\t' || out.back() == '\n' || out.back() == '\r'))
    out.pop_back();
  return out;
}

}  // namespace moelsp::lsp
