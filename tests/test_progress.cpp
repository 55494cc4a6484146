// The command line's progress indicator (cli/progress.h) and expert-usage
// report (cli/expert_report.h): their text, line by line.
#include <cstdio>
#include <regex>
#include <string>

#include <catch2/catch.hpp>

#include "expert_report.h"
#include "progress.h"

using namespace moelsp::cli;

namespace {

// Everything written to a FILE* opened on memory.
struct Captured {
  char* buf = nullptr;
  size_t size = 0;
  std::FILE* f = open_memstream(&buf, &size);
  ~Captured() {
    if (f) std::fclose(f);
    std::free(buf);
  }
  std::string text() {
    std::fflush(f);
    return std::string(buf, size);
  }
};

}  // namespace

TEST_CASE("progress text: the plain line and the done line") {
  const double gib = 1024.0 * 1024 * 1024;
  ProgressState s{.label = "quantize",
                  .done = 1.2 * gib,
                  .total = 2.4 * gib,
                  .elapsed_s = 4,
                  .unit = ProgressUnit::Bytes,
                  .note = "blk.7.ffn_up_exps.weight -> Q4_K"};
  CHECK(progress_text(s, false) ==
        "quantize: 50% (1.20 of 2.40 GiB, 307 MiB/s, ETA 0:04) blk.7.ffn_up_exps.weight -> Q4_K");
  s.done = s.total;
  s.elapsed_s = 8;
  s.finished = true;
  s.note = {};
  CHECK(progress_text(s, false) == "quantize: done, 2.40 GiB in 0:08 (307 MiB/s)");
  // Counted units, with the running figure as the note.
  ProgressState w{
      .label = "perplexity", .done = 30, .total = 120, .elapsed_s = 75, .unit_name = "windows", .note = "ppl 12.3456"};
  CHECK(progress_text(w, false) == "perplexity: 25% (30 of 120 windows, 0.40 windows/s, ETA 3:45) ppl 12.3456");
  w.done = w.total = 120;
  w.elapsed_s = 3725;
  w.finished = true;
  CHECK(progress_text(w, false) == "perplexity: done, 120 windows in 1:02:05 (0.03 windows/s) ppl 12.3456");
  // Nothing done yet: no rate, no ETA.
  const ProgressState z{.label = "bench", .done = 0, .total = 6, .elapsed_s = 1, .unit_name = "runs"};
  CHECK(progress_text(z, false) == "bench: 0% (0 of 6 runs)");
}

TEST_CASE("progress text: the terminal bar fits its width") {
  const ProgressState s{.label = "loading m.gguf",
                        .done = 512.0 * 1024 * 1024,
                        .total = 1024.0 * 1024 * 1024,
                        .elapsed_s = 2,
                        .unit = ProgressUnit::Bytes,
                        .note = "a note long enough to be cut at the edge of a narrow terminal"};
  const std::string wide = progress_text(s, true, 200);
  CHECK(wide ==
        "loading m.gguf [############............]  50% 0.50/1.00 GiB  256 MiB/s  ETA 0:02  a note long enough to be "
        "cut at the edge of a narrow terminal");
  const std::string narrow = progress_text(s, true, 60);
  CHECK(narrow.size() == 60);
  CHECK_THAT(narrow, Catch::StartsWith("loading m.gguf [#####.....]  50% 0.50/1.00 GiB"));
}

TEST_CASE("progress on a non-terminal: a line per interval, then the done line, nothing with quiet") {
  double now = 100;
  Captured out;
  {
    Progress p("perplexity", 10, ProgressUnit::Count,
               {.out = out.f, .tty = 0, .every_s = 10, .unit_name = "windows", .clock = [&] { return now; }});
    now = 105;
    p.update(1, "ppl 9.0");  // within the first interval: no line
    now = 111;
    p.update(2, "ppl 8.0");
    now = 115;
    p.update(3, "ppl 7.0");  // 4 s after the last line
    now = 121.5;
    p.update(5, "ppl 6.0");
    now = 130;
    p.finish("ppl 5.5");
    p.update(6);  // after finish: ignored
  }               // the destructor does not finish twice
  CHECK(out.text() ==
        "perplexity: 20% (2 of 10 windows, 0.18 windows/s, ETA 0:44) ppl 8.0\n"
        "perplexity: 50% (5 of 10 windows, 0.23 windows/s, ETA 0:22) ppl 6.0\n"
        "perplexity: done, 10 windows in 0:30 (0.33 windows/s) ppl 5.5\n");

  Captured quiet;
  {
    Progress p("quantize", 100, ProgressUnit::Bytes,
               {.quiet = true, .out = quiet.f, .tty = 0, .clock = [&] { return now; }});
    now = 1000;
    p.update(50);
    p.finish();
  }
  CHECK(quiet.text().empty());
}

TEST_CASE("progress on a terminal: redrawn in place, a newline when done") {
  double now = 0;
  Captured out;
  Progress p("bench", 4, ProgressUnit::Count,
             {.out = out.f, .tty = 1, .unit_name = "runs", .clock = [&] { return now; }});
  now = 1;
  p.update(1);
  now = 1.05;
  p.update(2);  // within 0.1 s of the last draw: skipped
  now = 2;
  p.finish();
  const std::string t = out.text();
  CHECK(std::count(t.begin(), t.end(), '\r') == 2);
  CHECK(std::count(t.begin(), t.end(), '\n') == 1);
  CHECK(t.back() == '\n');
  CHECK_THAT(t, Catch::Contains("1/4 runs") && Catch::Contains("4/4 runs") && Catch::Contains("\x1b[K") &&
                    !Catch::Contains("2/4 runs"));
}

TEST_CASE("expert heatmap: one cell per (layer, expert) carrying its count and share, CSV and JSON agree") {
  ExpertReport r;
  r.model = "m<&>.gguf";  // escaped in the SVG
  r.source = "t.txt";
  r.n_expert = 4;
  r.n_expert_used = 2;
  r.layers.push_back({.layer = 1, .tokens = {10, 0, 30, 60}, .entropy = 0.7, .thread_imbalance = 0.1});
  r.layers.push_back({.layer = 2, .tokens = {25, 25, 25, 25}, .entropy = 1.0, .thread_imbalance = 0.0});
  CHECK(r.layers[0].total() == 100);
  CHECK(r.layers[0].dead() == 1);
  CHECK(r.layers[0].max_over_mean() == Approx(2.4));
  CHECK(r.layers[1].max_over_mean() == Approx(1.0));

  const std::string svg = heatmap_svg(r);
  CHECK_THAT(svg, Catch::Contains("m&lt;&amp;&gt;.gguf") && !Catch::Contains("m<&>"));
  const std::regex cell(
      R"re(<rect [^>]*data-layer="(\d+)" data-expert="(\d+)" data-tokens="(\d+)" data-share="([0-9.]+)")re");
  int cells = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), cell); it != std::sregex_iterator(); ++it, ++cells) {
    const int layer = std::stoi((*it)[1]), e = std::stoi((*it)[2]);
    const auto& u = r.layers[size_t(layer - 1)];
    CHECK(std::stoll((*it)[3]) == u.tokens[size_t(e)]);
    CHECK(std::stod((*it)[4]) == Approx(double(u.tokens[size_t(e)]) / double(u.total())));
  }
  CHECK(cells == 8);
  // The dead expert is black; an even share is white.
  CHECK_THAT(svg, Catch::Contains(R"(fill="#000000" data-layer="1" data-expert="1")") &&
                      Catch::Contains(R"(fill="#ffffff" data-layer="2" data-expert="0")"));

  const std::string csv = report_csv(r);
  CHECK_THAT(csv, Catch::StartsWith("layer,expert,tokens,share\n1,0,10,0.100000\n1,1,0,0.000000\n"));
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 9);
  CHECK_THAT(report_json(r), Catch::Contains("\"maxOverMean\": 2.4") && Catch::Contains("\"dead\": 1"));
}
