// The workspace index (assist/workspace_index.h): .gitignore semantics, chunk
// boundaries and defined names, what a walk reads and skips, retrieval of a
// name's definition from another file, updates from the editor and the file
// system, and the prompt that carries the picks (budget split, stable order).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "assist/completion.h"
#include "assist/gitignore.h"
#include "assist/workspace_index.h"
#include "engine/gguf.h"
#include "test_data.h"

using namespace moelsp;
using namespace moelsp::assist;
namespace fs = std::filesystem;

namespace {

// A scratch directory, removed at the end.
struct TempTree {
  fs::path root;
  TempTree() {
    char tmpl[] = "/tmp/moelsp-index-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    root = tmpl;
  }
  ~TempTree() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  std::string write(const std::string& rel, const std::string& text) const {
    const fs::path p = root / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
};

std::string all_text(const RepoContext& c) {
  std::string out;
  for (const auto& s : c.snippets) out += "[" + s.path + "]\n" + s.text;
  return out;
}

// Whether a completion in `cur` that calls `name` gets its definition.
bool context_defines(const WorkspaceIndex& index, const std::string& cur, const std::string& name) {
  const RepoContext c =
      index.context_for({.path = cur, .prefix = "x = " + name + "(\ny = ", .suffix = "", .budget_bytes = 1000},
                        exclude_list(std::nullopt));
  return all_text(c).find("def " + name) != std::string::npos;
}

const char* kUtil =
    "\"\"\"Helpers.\"\"\"\n"
    "import zlib\n"
    "\n"
    "\n"
    "def compute_checksum(data, seed=0):\n"
    "    \"\"\"The CRC-32 of data, starting from seed.\"\"\"\n"
    "    return zlib.crc32(data, seed)\n"
    "\n"
    "\n"
    "class RingBuffer:\n"
    "    \"\"\"A fixed-size queue that drops its oldest item.\"\"\"\n"
    "\n"
    "    def __init__(self, capacity):\n"
    "        self.items = [None] * capacity\n";

}  // namespace

TEST_CASE("gitignore globs: * and ? stay in a component, ** crosses them") {
  CHECK(glob_match("*.py", "a.py"));
  CHECK_FALSE(glob_match("*.py", "d/a.py"));
  CHECK(glob_match("**/a.py", "a.py"));
  CHECK(glob_match("**/a.py", "x/y/a.py"));
  CHECK(glob_match("a/**/b", "a/b"));
  CHECK(glob_match("a/**/b", "a/x/y/b"));
  CHECK_FALSE(glob_match("a/**/b", "ab"));
  CHECK(glob_match("a/**", "a/x/y"));
  CHECK(glob_match("file?.txt", "file1.txt"));
  CHECK_FALSE(glob_match("file?.txt", "file/.txt"));
  CHECK(glob_match("[abc].txt", "b.txt"));
  CHECK_FALSE(glob_match("[!abc].txt", "b.txt"));
  CHECK(glob_match("[a-c]x", "cx"));
  CHECK(glob_match("\\*lit", "*lit"));
  CHECK_FALSE(glob_match("\\*lit", "xlit"));
}

TEST_CASE("gitignore rules: anchoring, directories only, negation, deeper files win") {
  IgnoreStack st;
  st.push({"", parse_gitignore("# build outputs\nbuild/\n*.log\n!keep.log\n/local_settings.py\nsrc/gen/\n\\#lit\n")});
  CHECK(st.ignored("build", true));
  CHECK_FALSE(st.ignored("build", false));  // a file named build is not a directory
  CHECK(st.ignored("a/build", true));       // no slash before the end: any depth
  CHECK(st.ignored("x.log", false));
  CHECK(st.ignored("deep/x.log", false));
  CHECK_FALSE(st.ignored("keep.log", false));
  CHECK(st.ignored("local_settings.py", false));
  CHECK_FALSE(st.ignored("app/local_settings.py", false));  // anchored to the root
  CHECK(st.ignored("src/gen", true));
  CHECK_FALSE(st.ignored("other/src/gen", true));
  CHECK(st.ignored("#lit", false));
  st.push({"sub", parse_gitignore("!*.log\n")});
  CHECK_FALSE(st.ignored("sub/x.log", false));  // the deeper file re-includes
  CHECK(st.ignored("other/x.log", false));
}

TEST_CASE("chunks start at definitions, with their decorators and comments") {
  CHECK(defined_name("def compute(x):") == "compute");
  CHECK(defined_name("    async def fetch(self):") == "fetch");
  CHECK(defined_name("class Foo(Base):") == "Foo");
  CHECK(defined_name("pub fn parse(input: &str) -> Result<()> {") == "parse");
  CHECK(defined_name("export function render(props) {") == "render");
  CHECK(defined_name("func (s *Server) Serve(l net.Listener) error {") == "Serve");
  CHECK(defined_name("static int count_lines(const char* s) {") == "count_lines");
  CHECK(defined_name("MAX_RETRIES = 5") == "MAX_RETRIES");
  CHECK(defined_name("TIMEOUT: float = 2.5") == "TIMEOUT");
  CHECK(defined_name("    x = 5").empty());  // not at module level
  CHECK(defined_name("if x == 5:").empty());
  CHECK(defined_name("foo(1, 2)").empty());  // a call
  CHECK(defined_name("int x = compute(3);").empty());

  const std::string text =
      "import os\n"          // 0
      "\n"                   // 1
      "@cache\n"             // 2
      "def a():\n"           // 3
      "    return 1\n"       // 4
      "\n"                   // 5
      "# The b function.\n"  // 6
      "def b():\n"           // 7
      "    return 2\n";      // 8
  CHECK(chunk_starts(text) == std::vector<uint32_t>{0, 2, 6});
  std::string longer;  // a long body is cut
  for (int i = 0; i < 200; ++i) longer += "x_" + std::to_string(i) + " = " + std::to_string(i) + "\n";
  CHECK(chunk_starts(longer).size() >= 2);
}

TEST_CASE("the index reads the project's source, and skips what it must not read") {
  TempTree t;
  t.write("pkg/util.py", kUtil);
  t.write("pkg/app.py", "from pkg.util import compute_checksum\n\ndef main():\n    pass\n");
  t.write(".gitignore", "build/\nlocal_settings.py\n");
  t.write("local_settings.py", "API_TOKEN = 'sk-live-gitignored-1234'\n");
  t.write("secrets.py", "API_TOKEN = 'sk-live-excluded-5678'\n");  // `secrets.*`: the exclude defaults
  t.write(".env", "API_TOKEN=sk-live-env\n");
  t.write("build/out.py", "def built(): pass\n");
  t.write("node_modules/lib/index.js", "function vendored() {}\n");
  t.write(".venv/lib/site.py", "def hidden(): pass\n");
  t.write("gen/messages_pb2.py", "def generated(): pass\n");
  t.write("gen/schema.py", "# Code generated by a tool. DO NOT EDIT.\ndef generated2(): pass\n");
  t.write("blob.py", std::string("def bin():\0\0\0", 13));
  t.write("big.py", std::string(2 << 20, '#'));
  t.write("README.txt", "not code\n");

  WorkspaceIndex index;
  index.start({.roots = {t.root.string()}});
  index.wait_idle();
  const IndexStats s = index.stats();
  CHECK(s.state == "ready");
  CHECK(s.files == 2);  // pkg/util.py, pkg/app.py
  CHECK(s.skipped_excluded == 1);
  CHECK(s.skipped_binary == 1);
  CHECK(s.skipped_large == 1);
  CHECK(s.skipped_generated == 2);
  CHECK(s.skipped_ignored >= 3);  // local_settings.py, build/, node_modules/, .venv/
  CHECK(s.memory_bytes > 0);
  CHECK(index.git_ignored((t.root / "local_settings.py").string()));
  CHECK(index.git_ignored((t.root / "build/out.py").string()));
  CHECK_FALSE(index.git_ignored((t.root / "pkg/app.py").string()));
}

TEST_CASE("a completion gets the definition of a name from another file, never its own file or a secret") {
  TempTree t;
  t.write("pkg/util.py", kUtil);
  t.write("pkg/other.py", "def unrelated_helper():\n    return 'nothing to see'\n");
  t.write(".gitignore", "local_settings.py\n");
  t.write("local_settings.py", "def compute_checksum():\n    return 'sk-live-gitignored'\n");
  t.write("secrets.py", "def compute_checksum():\n    return 'sk-live-excluded'\n");
  const std::string app = t.write("pkg/app.py", "");
  WorkspaceIndex index;
  index.start({.roots = {t.root.string()}});
  index.wait_idle();

  const std::string prefix = "from pkg.util import compute_checksum\n\n\ndef verify(blob, expected):\n    return ";
  const RepoContext c = index.context_for({.path = app, .prefix = prefix, .suffix = "\n", .budget_bytes = 2000},
                                          exclude_list(std::nullopt));
  const std::string text = all_text(c);
  INFO(text);
  CHECK(c.path == "pkg/app.py");
  CHECK(c.repo == t.root.filename().string());
  CHECK(text.find("def compute_checksum(data, seed=0):") != std::string::npos);
  // A definition is its signature line (kIndexDefinitionLines): many fit a small budget.
  const bool one_line = std::any_of(c.snippets.begin(), c.snippets.end(), [](const Snippet& s) {
    return s.path == "pkg/util.py" && s.text == "def compute_checksum(data, seed=0):\n";
  });
  CHECK(one_line);
  CHECK(text.find("sk-live") == std::string::npos);
  for (const auto& sn : c.snippets) {
    CHECK(sn.path != "pkg/app.py");
    CHECK(!sn.text.empty());
    CHECK(sn.text.back() == '\n');
  }
  // The budget holds (snippet text and headers together).
  for (size_t budget : {0, 60, 200, 500}) {
    const RepoContext small = index.context_for({.path = app, .prefix = prefix, .suffix = "", .budget_bytes = budget},
                                                exclude_list(std::nullopt));
    size_t used = 0;
    for (const auto& sn : small.snippets) used += sn.text.size() + sn.path.size() + 4;
    CHECK(used <= budget);
  }
  // A setting changed since the walk filters at query time.
  const RepoContext filtered =
      index.context_for({.path = app, .prefix = prefix, .suffix = "", .budget_bytes = 2000}, ExcludeList("util.py"));
  CHECK(all_text(filtered).find("compute_checksum(data") == std::string::npos);
}

TEST_CASE("the word being typed does not move the picks, a change to the index does") {
  TempTree t;
  t.write("pkg/util.py", kUtil);
  const std::string app = t.write("pkg/app.py", "");
  WorkspaceIndex index;
  index.start({.roots = {t.root.string()}});
  index.wait_idle();
  const auto query = [&](const std::string& prefix) {
    return all_text(index.context_for({.path = app, .prefix = prefix, .suffix = "\n", .budget_bytes = 2000},
                                      exclude_list(std::nullopt)));
  };
  const std::string head = "from pkg.util import compute_checksum\n\ndef verify(blob):\n    return ";
  const std::string base = query(head);
  CHECK(base.find("def compute_checksum(") != std::string::npos);
  for (const char* typed : {"c", "comp", "compute_ch"}) CHECK(query(head + typed) == base);
  // A finished word is a name: the memo does not answer for it.
  t.write("pkg/extra.py", "def shiny_new_helper(x):\n    return x\n");
  index.file_changed((t.root / "pkg/extra.py").string());
  index.wait_idle();
  CHECK(query(head + "shiny_new_helper(").find("def shiny_new_helper(x):") != std::string::npos);
  // The same text after the index changed: asked again, not remembered.
  index.file_deleted((t.root / "pkg/extra.py").string());
  index.wait_idle();
  CHECK(query(head + "shiny_new_helper(").find("shiny_new_helper") == std::string::npos);
}

TEST_CASE("code like the text around the cursor is found without a defined name (BM25)") {
  TempTree t;
  t.write("net/retry.py",
          "def backoff_schedule(attempts):\n    delays = [min(2 ** n, 30) for n in range(attempts)]\n"
          "    return jitter_delays(delays)\n");
  t.write("ui/colors.py", "def palette():\n    return ['red', 'green', 'blue']\n");
  const std::string cur = t.write("net/client.py", "");
  WorkspaceIndex index;
  index.start({.roots = {t.root.string()}});
  index.wait_idle();
  const RepoContext c = index.context_for({.path = cur,
                                           .prefix = "# compute the delays with jitter for each attempt\ndelays = \n",
                                           .suffix = "",
                                           .budget_bytes = 300},
                                          exclude_list(std::nullopt));
  REQUIRE(!c.snippets.empty());
  CHECK(c.snippets[0].path == "net/retry.py");
}

TEST_CASE("the index follows the editor's buffers and the file system") {
  TempTree t;
  const std::string util = t.write("util.py", "def old_name():\n    pass\n");
  const std::string cur = t.write("main.py", "");
  WorkspaceIndex index;
  index.start({.roots = {t.root.string()}});
  index.wait_idle();
  const auto find = [&](const std::string& name) { return context_defines(index, cur, name); };
  CHECK(find("old_name"));
  // An open document's text stands for its file.
  index.document_text(util, std::make_shared<const std::string>("def new_name():\n    pass\n"));
  index.wait_idle();
  CHECK(find("new_name"));
  CHECK_FALSE(find("old_name"));
  // While typing, the buffer is indexed once the document has been still for a while.
  index.document_text(util, std::make_shared<const std::string>("def typed_name():\n    pass\n"), true);
  CHECK(find("new_name"));  // not yet
  index.wait_idle();
  CHECK(find("typed_name"));
  // A close drops a typed text still waiting.
  index.document_text(util, std::make_shared<const std::string>("def never_indexed():\n    pass\n"), true);
  // Closed: the file on disk again.
  index.close_document(util);
  index.wait_idle();
  CHECK(find("old_name"));
  CHECK_FALSE(find("never_indexed"));
  // A file created, changed, deleted outside the editor.
  const std::string added = t.write("added.py", "def fresh_function():\n    pass\n");
  index.file_changed(added);
  index.wait_idle();
  CHECK(find("fresh_function"));
  fs::remove(added);
  index.file_deleted(added);
  index.wait_idle();
  CHECK_FALSE(find("fresh_function"));
  // A file changed on disk but not yet re-read is not trusted (offsets moved).
  t.write("util.py", "# a new first line\ndef old_name():\n    pass\n");
  CHECK_FALSE(find("old_name"));
  index.file_changed(util);
  index.wait_idle();
  CHECK(find("old_name"));
  // A .gitignore change walks again.
  const std::string gi = t.write(".gitignore", "util.py\n");
  index.file_changed(gi);
  index.wait_idle();
  CHECK_FALSE(find("old_name"));
  // Open documents outside the roots join too, and leave when closed.
  TempTree elsewhere;
  const std::string loose = elsewhere.write("loose.py", "");
  index.document_text(loose, std::make_shared<const std::string>("def loose_function():\n    pass\n"));
  index.wait_idle();
  CHECK(find("loose_function"));
  index.close_document(loose);
  index.wait_idle();
  CHECK_FALSE(find("loose_function"));
  // An excluded open document never joins.
  index.document_text(elsewhere.write(".env.local", ""),
                      std::make_shared<const std::string>("def env_function(): pass\n"));
  index.document_text(elsewhere.write("secrets.py", ""),
                      std::make_shared<const std::string>("def secret_function(): pass\n"));
  index.wait_idle();
  CHECK_FALSE(find("secret_function"));
  CHECK(index.stats().updates > 0);
}

TEST_CASE("FIM prompt: other files' code first, at most half the budget, the prefix keeps its end") {
  const auto file = gguf::File::open(test::data_path("reference/deepseek2-lite-ref.gguf"));
  const auto tok = Tokenizer::from_gguf(file);
  const auto& sp = tok->special();
  std::string prefix;
  for (int i = 0; i < 300; ++i) prefix += "value_" + std::to_string(i) + " = compute(" + std::to_string(i) + ")\n";
  CompletionContext ctx{prefix + "result = ", "\n", false, true, {}};
  ctx.repo.path = "pkg/app.py";
  ctx.repo.snippets = {{"pkg/a.py", "def alpha():\n    return 1\n", ""},
                       {"pkg/b.py", "def beta():\n    return 2\n", ""}};
  const auto first = tok->encode("# pkg/a.py\ndef alpha():\n    return 1\n");
  const auto second = tok->encode("# pkg/b.py\ndef beta():\n    return 2\n");
  for (size_t budget : {200, 500}) {
    const auto p = fim_prompt(*tok, ctx, budget, FimOrder::kPsm);
    CHECK(p.size() <= budget);
    CHECK(p.size() + kPrefixCutStep > budget);
    const auto pre = std::find(p.begin(), p.end(), sp.fim_pre);
    REQUIRE(pre != p.end());
    // Both snippets, in order, ahead of <fim_prefix>, in Python's comment syntax.
    std::vector<TokenId> want = first;
    want.insert(want.end(), second.begin(), second.end());
    CHECK(std::vector<TokenId>(p.begin() + (sp.add_bos ? 1 : 0), pre) == want);
    // The prefix still ends at the cursor.
    const auto full = fim_prompt(*tok, {ctx.prefix, ctx.suffix, false, true, {}}, 0, FimOrder::kPsm);
    const auto suf = std::find(p.begin(), p.end(), sp.fim_suf),
               full_suf = std::find(full.begin(), full.end(), sp.fim_suf);
    CHECK(std::equal(suf - 10, suf, full_suf - 10));
  }
  // A budget too small for both: whole snippets go, the first first.
  const size_t tight = 2 * (second.size() + 1);
  const auto p = fim_prompt(*tok, ctx, tight, FimOrder::kPsm);
  const auto pre = std::find(p.begin(), p.end(), sp.fim_pre);
  CHECK(std::vector<TokenId>(p.begin() + (sp.add_bos ? 1 : 0), pre) == second);
}

TEST_CASE("repository format and comment syntax for the context") {
  RepoContext c{"proj", "src/main.rs", {{"src/lib.rs", "pub fn helper() {}\n", ""}, {"build.py", "x = 1", ""}}};
  CHECK(context_as_comments(c) == "// src/lib.rs\npub fn helper() {}\n// build.py\nx = 1\n");
  CHECK(context_as_repo(c, "<|repo_name|>", "<|file_sep|>") ==
        "<|repo_name|>proj\n<|file_sep|>src/lib.rs\npub fn helper() {}\n<|file_sep|>build.py\nx = 1\n"
        "<|file_sep|>src/main.rs\n");
  CHECK(comment_prefix("a/b.py") == "#");
  CHECK(comment_prefix("x.lua") == "--");
  CHECK(comment_prefix("CMakeLists.txt") == "#");
  CHECK(comment_prefix("main.cpp") == "//");
}

TEST_CASE("a document's context keeps its head while the picks move") {
  const Snippet a{"a.py", "def a(): pass\n", ""}, b{"b.py", "def b(): pass\n", ""}, c{"c.py", "def c(): pass\n", ""},
      d{"d.py", "def d(): pass\n", ""};
  const size_t each = a.text.size() + a.path.size() + 4;
  const auto same = [](const std::vector<Snippet>& x, const std::vector<Snippet>& y) {
    return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), [](const Snippet& p, const Snippet& q) {
             return p.path == q.path && p.text == q.text;
           });
  };
  // Nothing new picked: the last context again, even with a pick dropped.
  CHECK(same(merge_context({a, b, c}, {a, c}, 10 * each), {a, b, c}));
  // A new pick goes at the end; the head stays.
  CHECK(same(merge_context({a, b}, {b, c}, 10 * each), {a, b, c}));
  // No room: the head is cut from its end to make room.
  CHECK(same(merge_context({a, b, c}, {a, d}, 3 * each), {a, b, d}));
  // Mostly stale: start over from the picks.
  CHECK(same(merge_context({a, b, c}, {d}, 4 * each), {d}));
  CHECK(same(merge_context({}, {c, d}, 10 * each), {c, d}));
  CHECK(merge_context({a}, {b}, 0).empty());
}

TEST_CASE("open documents: never-saved text leaves with its close, a walk keeps buffers and checks them again") {
  TempTree t;
  t.write("util.py", "def on_disk():\n    pass\n");
  const std::string cur = t.write("main.py", "");
  WorkspaceIndex index;
  index.start({.roots = {t.root.string()}});
  index.wait_idle();
  const auto find = [&](const std::string& name) { return context_defines(index, cur, name); };
  // A new file, never saved, closed without saving: its text goes with it.
  const std::string scratch = (t.root / "scratch.py").string();
  index.document_text(scratch, std::make_shared<const std::string>("def pasted_secret():\n    pass\n"));
  index.wait_idle();
  CHECK(find("pasted_secret"));
  index.close_document(scratch);
  index.wait_idle();
  CHECK_FALSE(find("pasted_secret"));
  // A walk (here: a .gitignore saved) keeps an open document's buffer, not the file on disk...
  const std::string util = (t.root / "util.py").string();
  index.document_text(util, std::make_shared<const std::string>("def in_buffer():\n    pass\n"));
  index.file_changed(t.write(".gitignore", "build/\n"));
  index.wait_idle();
  CHECK(find("in_buffer"));
  CHECK_FALSE(find("on_disk"));
  // ... and drops it when the new rules hide it.
  index.file_changed(t.write(".gitignore", "util.py\n"));
  index.wait_idle();
  CHECK_FALSE(find("in_buffer"));
  CHECK(index.git_ignored(util));
  CHECK_FALSE(index.holds(util));
}

TEST_CASE("walking off: open documents only, placed and filtered by the roots' .gitignore") {
  TempTree t;
  t.write("lib.py", "def from_disk():\n    pass\n");
  t.write(".gitignore", "private.py\n");
  const std::string cur = t.write("main.py", "");
  WorkspaceIndex index;
  index.start({.roots = {t.root.string()}, .walk = false});
  index.document_text((t.root / "open.py").string(), std::make_shared<const std::string>("def opened():\n    pass\n"));
  index.document_text((t.root / "private.py").string(),
                      std::make_shared<const std::string>("def hidden():\n    pass\n"));
  index.wait_idle();
  const RepoContext c = index.context_for(
      {.path = cur, .prefix = "from_disk()\nopened()\nhidden()\n", .suffix = "", .budget_bytes = 2000},
      exclude_list(std::nullopt));
  const std::string text = all_text(c);
  CHECK(text.find("def opened") != std::string::npos);
  CHECK(text.find("[open.py]") != std::string::npos);  // placed relative to its root
  CHECK(text.find("def from_disk") == std::string::npos);
  CHECK(text.find("def hidden") == std::string::npos);
  CHECK(index.git_ignored((t.root / "private.py").string()));
}

TEST_CASE("gitignore: a BOM is skipped and a pathological glob gives up instead of hanging") {
  IgnoreStack st;
  st.push({"", parse_gitignore("\xEF\xBB\xBF.env\nsecrets/\n")});
  CHECK(st.ignored(".env", false));
  CHECK(st.ignored("secrets", true));
  CHECK_FALSE(glob_match("*a*a*a*a*a*a*a*a*a*a*a*a*b", std::string(200, 'a')));
  CHECK(glob_match("*a*b", "xxaxxb"));
}

TEST_CASE("lines_at: whole lines from a line, bounded by a count and bytes") {
  CHECK(lines_at("a\nbb\nccc\n", 1, 2, 100) == "bb\nccc\n");
  CHECK(lines_at("a\nbb\nccc", 2, 5, 100) == "ccc\n");  // the last line gets its '\n'
  CHECK(lines_at("a\nbb\nccc\n", 0, 3, 4) == "a\n");    // "a\nbb\n" is 5 bytes
  CHECK(lines_at("a\n", 5, 1, 100).empty());            // past the end
  CHECK(lines_at("abc\n", 0, 1, 2).empty());            // a first line over the bytes: nothing
}
