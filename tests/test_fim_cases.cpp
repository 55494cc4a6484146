// The FIM benchmark's cases and metrics (bench/fim_cases.h).
#include <catch2/catch.hpp>

#include "../bench/fim_cases.h"
#include "test_data.h"

using namespace moelsp::bench;

namespace {

const char* kSource = R"(import os


def walk(top):
    """Yield files.

    if this: not code
    """
    for dirpath, dirnames, names in os.walk(top):
        for name in names:
            yield os.path.join(dirpath, name)


class Counter:
    def add(self, word):
        self.counts[word] = self.counts.get(word, 0) + 1
        if word not in self.seen:
            self.seen.add(word)
            self.order.append(word)
        return self.counts[word]
)";

}  // namespace

TEST_CASE("FIM cases cut a line's rest inside a function, or a block's body, and put it back exactly") {
  const std::vector<std::pair<std::string, std::string>> files{{"walk.py", kSource}};
  const auto cases = make_fim_cases(files, 100, 100);
  size_t lines = 0, blocks = 0;
  for (const FimCase& c : cases) {
    INFO(c.middle);
    CHECK(c.document.substr(0, c.cursor) + c.middle + c.document.substr(c.cursor) == kSource);
    if (c.multi_line) {
      ++blocks;
      CHECK(std::count(c.middle.begin(), c.middle.end(), '\n') >= 1);
      CHECK(c.document[c.cursor - 1] == ' ');  // after the body's indentation
    } else {
      ++lines;
      CHECK(c.middle.find('\n') == std::string::npos);
      CHECK(c.middle.size() >= 3);
      CHECK(c.document[c.cursor] == '\n');  // the rest of the line is what is cut
      // Never from the docstring, the imports or a header.
      CHECK(c.middle.find("not code") == std::string::npos);
      CHECK(c.middle.find("import") == std::string::npos);
      CHECK(c.middle.back() != ':');
    }
  }
  // Statements in function bodies: the yield, the two in add's if, the
  // counts line and the return (the for lines are headers).
  CHECK(lines == 5);
  // Bodies of 2-8 lines: walk's (its docstring disqualifies it: not plain
  // code), the outer for (2 lines), Counter (6 lines), add (5), add's if (2).
  CHECK(blocks == 4);
}

TEST_CASE("the FIM benchmark's fixed set: at least 500 cases from the held-out files, the same every time") {
  const auto files = read_fim_files(moelsp::test::data_path("fim"));
  REQUIRE(files.size() >= 5);
  const auto a = make_fim_cases(files, 400, 200), b = make_fim_cases(files, 400, 200);
  REQUIRE(a.size() == 600);
  CHECK(std::count_if(a.begin(), a.end(), [](const FimCase& c) { return c.multi_line; }) == 200);
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].file == b[i].file);
    CHECK(a[i].cursor == b[i].cursor);
    CHECK(a[i].middle == b[i].middle);
  }
}

TEST_CASE("FIM metrics: exact match, first-line exact match, edit similarity") {
  CHECK(edit_similarity("kitten", "sitting") == Approx(1.0 - 3.0 / 7.0));
  CHECK(edit_similarity("", "") == 1.0);
  CHECK(edit_similarity("abc", "") == 0.0);
  CHECK(edit_similarity("same", "same") == 1.0);
  const FimScore s = score("return lines  \n", "return lines");
  CHECK(s.exact);
  CHECK(s.first_line_exact);
  CHECK(s.edit_similarity == 1.0);
  const FimScore t = score("x = 1\ny = 2", "x = 1\nz = 3");
  CHECK(!t.exact);
  CHECK(t.first_line_exact);
  CHECK(t.edit_similarity == Approx(1.0 - 2.0 / 11.0));
  CHECK(!score("", "return 1").first_line_exact);
}
