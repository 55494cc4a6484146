// .gitignore rules, as git reads them, for the workspace index: a project's
// build outputs, vendored trees and local files (often secrets: `.env`,
// `credentials.json`) are what its .gitignore hides, and the index must not
// read them. What is implemented (gitignore(5)): blank lines and `#`
// comments skipped, `\` escapes, `!` re-includes, a trailing `/` matches
// directories only, a pattern with a `/` before its end is anchored to its
// .gitignore's directory (otherwise it matches a name at any depth), `*` `?`
// `[…]` never match `/`, `**` as a whole path component matches any number of
// them. A directory that is ignored hides everything below it (git does not
// look inside, so a later `!` cannot bring a file back). Not read: the user's
// core.excludesFile (a per-user setting, not the project's).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moelsp::assist {

// gitignore-style glob: `*` and `?` and `[…]` within one path component,
// `**/`, `/**/` and `/**` across components.
bool glob_match(std::string_view pattern, std::string_view path);

struct IgnoreRule {
  std::string pattern;  // without its `!`, leading `/` and trailing `/`
  bool negate = false, dir_only = false, anchored = false;
};

// One .gitignore file's rules; `base` is its directory relative to the
// workspace root ("" for the root, else "src/gen", no trailing slash).
struct IgnoreFile {
  std::string base;
  std::vector<IgnoreRule> rules;
};

std::vector<IgnoreRule> parse_gitignore(std::string_view text);

// The rules in force in one directory: those of each .gitignore from the
// root down to it, outermost first (a deeper file's rules win, and in one
// file the last matching rule wins).
class IgnoreStack {
 public:
  void push(IgnoreFile f) { files_.push_back(std::move(f)); }
  void pop() { files_.pop_back(); }
  size_t depth() const { return files_.size(); }
  // `rel`: the path relative to the workspace root.
  bool ignored(std::string_view rel, bool is_dir) const;

 private:
  std::vector<IgnoreFile> files_;
};

}  // namespace moelsp::assist
