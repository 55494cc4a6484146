#include "repo_context.h"

#include <algorithm>
#include <array>

namespace moelsp::assist {

std::string_view comment_prefix(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  const size_t dot = name.rfind('.');
  std::string ext(dot == std::string_view::npos ? "" : name.substr(dot + 1));
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  static constexpr std::string_view kHash[] = {"py",   "pyi",  "sh",  "bash",  "zsh", "rb", "pl", "pm",  "r",
                                               "toml", "yaml", "yml", "cmake", "nim", "jl", "ex", "exs", "cfg"};
  static constexpr std::string_view kDash[] = {"lua", "sql", "hs", "elm", "ada"};
  static constexpr std::string_view kSemi[] = {"lisp", "el", "clj", "scm", "asm", "s"};
  static constexpr std::string_view kPercent[] = {"tex", "erl", "m"};
  const auto in = [&](const auto& list) { return std::find(std::begin(list), std::end(list), ext) != std::end(list); };
  if (in(kHash) || name == "Makefile" || name == "CMakeLists.txt" || name == "Dockerfile" || name == "BUILD")
    return "#";
  if (in(kDash)) return "--";
  if (in(kSemi)) return ";";
  if (in(kPercent)) return "%";
  return "//";
}

namespace {
size_t cost(const Snippet& s) { return s.text.size() + s.path.size() + 4; }
bool has(const std::vector<Snippet>& v, const Snippet& s) {
  return std::any_of(v.begin(), v.end(), [&](const Snippet& x) { return x.path == s.path && x.text == s.text; });
}
}  // namespace

std::string lines_at(std::string_view text, size_t line, size_t max_lines, size_t max_bytes) {
  size_t b = 0;
  for (size_t k = 0; k < line; ++k) {
    const size_t nl = text.find('\n', b);
    if (nl == std::string_view::npos) return "";
    b = nl + 1;
  }
  size_t e = b;
  for (size_t k = 0; k < max_lines && e < text.size(); ++k) {
    const size_t nl = text.find('\n', e);
    const size_t next = nl == std::string_view::npos ? text.size() : nl + 1;
    if (next - b > max_bytes) break;
    e = next;
  }
  std::string out(text.substr(b, e - b));
  if (!out.empty() && out.back() != '\n') out += '\n';
  return out;
}

std::vector<Snippet> merge_context(const std::vector<Snippet>& last, const std::vector<Snippet>& picks,
                                   size_t budget_bytes) {
  size_t need = 0, last_size = 0;
  for (const Snippet& s : picks)
    if (!has(last, s)) need += cost(s);
  for (const Snippet& s : last) last_size += cost(s);
  if (need == 0 && last_size <= budget_bytes) return last;
  std::vector<Snippet> out;
  size_t used = 0, stale = 0;
  for (const Snippet& s : last) {
    if (used + cost(s) + need > budget_bytes) break;
    out.push_back(s);
    used += cost(s);
    if (!has(picks, s)) stale += cost(s);
  }
  if (stale * 2 > budget_bytes) return picks;
  for (const Snippet& s : picks)
    if (!has(out, s) && used + cost(s) <= budget_bytes) {
      out.push_back(s);
      used += cost(s);
    }
  return out;
}

std::string context_as_comments(const RepoContext& c) {
  const std::string_view mark = comment_prefix(c.path);
  std::string out;
  for (const Snippet& s : c.snippets) {
    out.append(mark).append(" ").append(s.path).append("\n").append(s.text);
    if (!s.text.empty() && s.text.back() != '\n') out += '\n';
  }
  return out;
}

std::string context_as_repo(const RepoContext& c, std::string_view repo_name, std::string_view file_sep) {
  std::string out;
  out.append(repo_name).append(c.repo).append("\n");
  for (const Snippet& s : c.snippets) {
    out.append(file_sep).append(s.path).append("\n").append(s.text);
    if (!s.text.empty() && s.text.back() != '\n') out += '\n';
  }
  out.append(file_sep).append(c.path).append("\n");
  return out;
}

}  // namespace moelsp::assist
