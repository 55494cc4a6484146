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
