// Other files' code ahead of a completion prompt: what the workspace index
// (workspace_index.h) picked for one cursor, and how a prompt spells it.
// Two spellings: a model trained on repository-level FIM (Qwen2.5/3-Coder:
// `<|repo_name|>`, `<|file_sep|>`) gets its own format; any other model gets
// each snippet under a comment line naming its path, in the comment syntax of
// the file being completed (`# path` in Python, `// path` in C++), so the
// prompt still reads as code of that language.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moelsp::assist {

struct Snippet {
  std::string path;  // relative to its workspace root (or the file's name outside any root)
  std::string text;  // whole lines, ending in '\n'
  std::string file;  // its absolute path (not in the prompt; "" where unknown, e.g. /infill's input_extra)
};

// A definition's snippet: its first lines. From the index's table of
// defined names, the signature line only: the index offers many candidates
// and what a completion mostly needs is the name and its parameters — on the
// cross-file benchmark at the embedded model's 480-token budget, one line
// instead of six took the share of prompts holding the needed definition from
// 19 % to 69 %. From the editor's language servers (resolved for the names
// at the cursor, a few), the signature and the docstring's start.
inline constexpr size_t kIndexDefinitionLines = 1, kIndexDefinitionBytes = 240;
inline constexpr size_t kEditorDefinitionLines = 3, kEditorDefinitionBytes = 320;

// Whole lines of `text` from line `line` (0-based): at most max_lines lines
// and max_bytes bytes, ending in '\n' ("" past the end).
std::string lines_at(std::string_view text, size_t line, size_t max_lines, size_t max_bytes);

// Snippets in a stable order (by path, then position in the file: the same
// picks give the same bytes, so the engine's KV prefix survives keystrokes).
struct RepoContext {
  std::string repo;  // the root folder's name
  std::string path;  // the file being completed, relative like the snippets'
  std::vector<Snippet> snippets;
  bool empty() const { return snippets.empty(); }
};

// The snippets for a document's next completion, given those its last one
// sent (`last`) and the index's picks now (`picks`), within budget_bytes (a
// snippet costs its text, its path and 4): the prompt's head — and the KV
// the engine holds for it — survives when the picks move. Nothing new picked:
// `last` again. Otherwise the longest head of `last` that leaves room for the
// picks it lacks, then those picks (in their order); from `picks` alone when
// more than half the budget would go to snippets no longer picked. A snippet
// is the same when its path and text are. Kept snippets may be out of date
// (a file edited since) until the picks move past them, as llama.vscode's
// ring of chunks is.
std::vector<Snippet> merge_context(const std::vector<Snippet>& last, const std::vector<Snippet>& picks,
                                   size_t budget_bytes);

// The line-comment marker of a file's language, from its name: "#" (Python,
// shell, Ruby, TOML, YAML, CMake…), "--" (Lua, SQL, Haskell), ";" (Lisp,
// assembly), "%" (TeX, Erlang), "//" otherwise (C-family, Rust, Go, JS/TS…).
std::string_view comment_prefix(std::string_view path);

// The snippets as comment-headed code: "<c> <path>\n<text>" each.
std::string context_as_comments(const RepoContext& c);

// The snippets in the repository format: "<|repo_name|>repo\n" then
// "<|file_sep|>path\ntext" each, then "<|file_sep|>current-path\n" (the
// FIM part follows). `file_sep`/`repo_name`: the tokens' texts.
std::string context_as_repo(const RepoContext& c, std::string_view repo_name, std::string_view file_sep);

}  // namespace moelsp::assist
