#include "completion.h"

#include <algorithm>

namespace moelsp::lsp {

namespace {
std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}
}  // namespace

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
  // when the text after the cursor already closes it.
  int depth = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const char ch = out[i];
    if (ch == '(' || ch == '[' || ch == '{') ++depth;
    else if (ch == ')' || ch == ']' || ch == '}') {
      if (depth == 0 && ctx.suffix.find(ch) != std::string::npos &&
          trim(ctx.suffix.substr(0, ctx.suffix.find('\n'))).find(ch) != std::string::npos) {
        out.resize(i);
        break;
      }
      depth = std::max(0, depth - 1);
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == '\t' || out.back() == '\n' || out.back() == '\r'))
    out.pop_back();
  return out;
}

}  // namespace moelsp::lsp
