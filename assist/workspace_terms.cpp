// The workspace index's text side: chunk boundaries, defined names,
// identifier terms, and which files are worth reading.
#include <algorithm>
#include <array>
#include <cctype>

#include "assist/completion.h"
#include "assist/workspace_index_impl.h"

namespace moelsp::assist {

namespace {

constexpr uint32_t kChunkLines = 40;  // a chunk's most lines (a long definition is cut in pieces)

// Words every file has: keywords of the usual languages, and names too common
// to tell chunks apart. Lower case (terms are).
bool is_keyword(std::string_view w) {
  static constexpr std::string_view kWords[] = {
      "and",      "as",        "assert",    "async",   "auto",     "await",   "bool",    "break",   "case",
      "catch",    "char",      "class",     "const",   "continue", "def",     "default", "define",  "del",
      "delete",   "do",        "double",    "elif",    "else",     "endif",   "enum",    "except",  "export",
      "extends",  "extern",    "false",     "finally", "float",    "fn",      "for",     "from",    "func",
      "function", "global",    "if",        "ifdef",   "ifndef",   "impl",    "import",  "in",      "include",
      "inline",   "int",       "interface", "is",      "lambda",   "let",     "long",    "mut",     "namespace",
      "new",      "none",      "nonlocal",  "not",     "null",     "nullptr", "or",      "package", "pass",
      "private",  "protected", "pub",       "public",  "raise",    "return",  "self",    "static",  "std",
      "str",      "struct",    "super",     "switch",  "template", "this",    "throw",   "true",    "try",
      "type",     "typename",  "unsigned",  "use",     "using",    "var",     "void",    "while",   "with",
      "yield"};
  return std::find(std::begin(kWords), std::end(kWords), w) != std::end(kWords);
}

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

template <class F>
void for_each_identifier(std::string_view text, F f) {
  for (size_t i = 0; i < text.size();) {
    if (!is_ident_start(text[i])) {
      // Skip a number or the rest of a non-identifier run whole (`0x1f`, `1e5`).
      if (is_word_char(text[i]))
        while (i < text.size() && is_word_char(text[i])) ++i;
      else ++i;
      continue;
    }
    const size_t b = i;
    while (i < text.size() && is_word_char(text[i])) ++i;
    f(text.substr(b, i - b));
  }
}

std::string_view trim_left(std::string_view s) {
  const size_t i = s.find_first_not_of(" \t");
  return i == std::string_view::npos ? std::string_view() : s.substr(i);
}

std::string_view ident_at(std::string_view s) {
  size_t i = 0;
  if (s.empty() || !is_ident_start(s[0])) return {};
  while (i < s.size() && is_word_char(s[i])) ++i;
  return s.substr(0, i);
}

}  // namespace

void for_each_term(std::string_view text, const std::function<void(std::string_view)>& f) {
  for_each_identifier(text, [&](std::string_view id) {
    const std::string whole = lower(id);
    if (id.size() >= 2 && !is_keyword(whole)) f(whole);
    // snake_case and camelCase parts: `get_unused_data`, `getUnusedData` → get, unused, data
    size_t b = 0;
    std::string part;
    const auto flush = [&](size_t e) {
      if (e > b) {
        part = lower(id.substr(b, e - b));
        if (part.size() >= 3 && part != whole && !is_keyword(part)) f(part);
      }
    };
    for (size_t k = 1; k <= id.size(); ++k) {
      const bool end = k == id.size();
      const bool split = !end && (id[k] == '_' || (std::isupper(static_cast<unsigned char>(id[k])) &&
                                                   std::islower(static_cast<unsigned char>(id[k - 1]))));
      if (end || split) {
        flush(k);
        b = end ? k : (id[k] == '_' ? k + 1 : k);
      }
    }
  });
}

void for_each_name(std::string_view text, const std::function<void(std::string_view)>& f) {
  for_each_identifier(text, [&](std::string_view id) {
    if (id.size() >= 3 && !is_keyword(lower(id))) f(id);
  });
}

std::string_view defined_name(std::string_view line) {
  const bool top = !line.empty() && line[0] != ' ' && line[0] != '\t';
  std::string_view s = trim_left(line);
  // Modifiers ahead of the keyword.
  for (bool again = true; again;) {
    again = false;
    for (std::string_view m : {"export ", "default ", "pub ", "pub(crate) ", "async ", "static ", "public ", "private ",
                               "protected ", "abstract ", "final ", "inline ", "unsafe "})
      if (s.starts_with(m)) {
        s = trim_left(s.substr(m.size()));
        again = true;
      }
  }
  for (std::string_view kw : {"def ", "class ", "fn ", "function ", "func ", "struct ", "enum ", "trait ", "interface ",
                              "type ", "union ", "module ", "const ", "let ", "var ", "macro_rules! "}) {
    if (!s.starts_with(kw)) continue;
    if ((kw == "const " || kw == "let " || kw == "var ") && !top) return {};  // only module-level bindings
    std::string_view rest = trim_left(s.substr(kw.size()));
    if (kw == "func " && rest.starts_with('(')) {  // Go methods: func (r *T) Name(
      const size_t close = rest.find(')');
      if (close == std::string_view::npos) return {};
      rest = trim_left(rest.substr(close + 1));
    }
    return ident_at(rest);
  }
  if (!top) return {};
  // Python/Ruby module-level `NAME = …` (not `==`).
  if (const std::string_view name = ident_at(s); !name.empty()) {
    const std::string_view after = trim_left(s.substr(name.size()));
    if (after.starts_with('=') && !after.starts_with("==")) return name;
    if (after.starts_with(':') && !after.starts_with("::") && after.find('=') != std::string_view::npos)
      return name;  // an annotated `NAME: T = …`
  }
  // C-style definitions at the top level: `type name(` with no `;` after it.
  const size_t paren = s.find('(');
  if (paren == std::string_view::npos || paren == 0 || s.find(';') != std::string_view::npos) return {};
  size_t e = paren;
  while (e > 0 && s[e - 1] == ' ') --e;
  size_t b = e;
  while (b > 0 && is_word_char(s[b - 1])) --b;
  if (b == 0 || b == e || !is_ident_start(s[b])) return {};  // a call (`foo(`), not `int foo(`
  const std::string_view name = s.substr(b, e - b);
  const std::string kw = lower(name);
  if (kw == "if" || kw == "while" || kw == "for" || kw == "switch" || kw == "return" || kw == "sizeof") return {};
  return name;
}

std::vector<uint32_t> chunk_starts(std::string_view text) {
  std::vector<uint32_t> starts{0};
  uint32_t line = 0, since = 0;
  bool prev_blank = false, prev_lead = false;  // prev_lead: the line before is a decorator or comment
  uint32_t lead_start = 0;
  for (size_t at = 0; at < text.size(); ++line) {
    const size_t nl = text.find('\n', at);
    const std::string_view l = text.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
    at = nl == std::string_view::npos ? text.size() : nl + 1;
    const std::string_view t = trim_left(l);
    const bool blank = t.empty() || t == "\r";
    const bool lead = t.starts_with('@') || t.starts_with('#') || t.starts_with("//") || t.starts_with("/*") ||
                      t.starts_with("* ") || t.starts_with("///");
    const bool top = !blank && l[0] != ' ' && l[0] != '\t' && !t.starts_with('}') && !t.starts_with(')');
    bool boundary = line > 0 && (!defined_name(l).empty() || (top && prev_blank));
    if (boundary && prev_lead) {  // decorators and doc comments go with what they describe
      if (lead_start > starts.back()) starts.push_back(lead_start), since = line - lead_start;
      boundary = false;
    } else if (!boundary && since >= kChunkLines && (blank || top)) {
      boundary = true;  // cut a long definition where a blank or top-level line allows
    }
    if (boundary && line > starts.back()) {
      starts.push_back(line);
      since = 0;
    }
    if (lead && !prev_lead) lead_start = line;
    prev_lead = lead;
    prev_blank = blank;
    ++since;
    if (since >= 2 * kChunkLines) {  // nothing allowed a cut: cut anyway
      starts.push_back(line + 1);
      since = 0;
    }
  }
  if (starts.size() > 1 && starts.back() >= line) starts.pop_back();
  return starts;
}

bool is_source_name(std::string_view name) {
  static constexpr std::string_view kExt[] = {
      "py",  "pyi",   "pyx",   "c",    "h",    "cc",     "cpp",    "cxx",    "hpp",   "hh",  "hxx", "ipp", "inl",
      "cu",  "cuh",   "rs",    "go",   "java", "kt",     "kts",    "scala",  "swift", "m",   "mm",  "js",  "jsx",
      "mjs", "cjs",   "ts",    "tsx",  "vue",  "svelte", "rb",     "php",    "cs",    "fs",  "lua", "pl",  "pm",
      "r",   "jl",    "dart",  "ex",   "exs",  "erl",    "hs",     "ml",     "mli",   "zig", "nim", "sh",  "bash",
      "sql", "proto", "cmake", "toml", "el",   "clj",    "groovy", "gradle", "v",     "sv"};
  static constexpr std::string_view kNames[] = {"Makefile", "CMakeLists.txt", "Dockerfile",
                                                "Rakefile", "Gemfile",        "BUILD"};
  if (std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames)) return true;
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  const std::string ext = lower(name.substr(dot + 1));
  return std::find(std::begin(kExt), std::end(kExt), ext) != std::end(kExt);
}

bool is_skipped_dir(std::string_view name) {
  static constexpr std::string_view kDirs[] = {"node_modules",  "__pycache__",      "site-packages",
                                               "dist-packages", "target",           "vendor",
                                               "venv",          "bower_components", "CMakeFiles"};
  return name.starts_with('.') || std::find(std::begin(kDirs), std::end(kDirs), name) != std::end(kDirs);
}

bool looks_generated(std::string_view name, std::string_view text) {
  for (std::string_view suffix :
       {".min.js", ".min.css", "_pb2.py", "_pb2_grpc.py", ".pb.go", ".pb.cc", ".pb.h", ".g.dart", ".designer.cs"})
    if (name.ends_with(suffix)) return true;
  // A marker in the first lines (the conventions of protoc, bison, Go,
  // Facebook's @generated, autotools…).
  size_t end = 0;
  for (int k = 0; k < 6 && end < text.size(); ++k) {
    const size_t nl = text.find('\n', end);
    end = nl == std::string_view::npos ? text.size() : nl + 1;
  }
  const std::string head = lower(text.substr(0, std::min<size_t>(end, 1024)));
  for (std::string_view m :
       {"do not edit", "@generated", "generated by", "autogenerated", "auto-generated", "code generated"})
    if (head.find(m) != std::string::npos) return true;
  return false;
}

}  // namespace moelsp::assist
