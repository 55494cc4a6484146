// Progress of the command line's long work (quantize, perplexity, experts,
// bench, loading a model): a live bar with rate and ETA when stderr is a
// terminal, plain periodic lines when it is not (a log file, CI), nothing with
// --quiet. Always stderr, never stdout (results go there), and never in LSP
// mode (stdout is the protocol, and nothing there uses this).
//
// Bar (redrawn at most 10 times a second, cut to the terminal's width):
//   quantize [##########..........]  50% 1.2/2.4 GiB  310 MiB/s  ETA 0:04  blk.7.ffn_up_exps.weight
// Lines (one per `every_s`, 10 s by default, then one when done):
//   quantize: 50% (1.2 of 2.4 GiB, 310 MiB/s, ETA 0:04) blk.7.ffn_up_exps.weight
//   quantize: done, 2.4 GiB in 0:08 (302 MiB/s)
// Debian has no small progress-bar library for C++ (indicators, tqdm.cpp and
// the like are not packaged), so this is one page of our own.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

namespace moelsp::cli {

enum class ProgressUnit { Count, Bytes };

struct ProgressOptions {
  bool quiet = false;
  std::FILE* out = stderr;
  int tty = -1;                     // −1: whether `out` is a terminal; 0 or 1 to force (tests)
  double every_s = 10;              // plain lines: seconds between them
  std::string unit_name{};          // Count: what is counted ("tensors", "windows"); empty: no unit
  std::function<double()> clock{};  // seconds; default steady_clock (tests pass their own)
};

// The text of one state, without the carriage return or newline: `bar` the
// terminal's form cut to `width` columns, else the plain line. done == total
// with `finished` gives the plain form's "done" line.
struct ProgressState {
  std::string_view label{};
  double done = 0, total = 0, elapsed_s = 0;
  ProgressUnit unit = ProgressUnit::Count;
  std::string_view unit_name{}, note{};
  bool finished = false;
};
std::string progress_text(const ProgressState& s, bool bar, int width = 100);

class Progress {
 public:
  Progress(std::string label, double total, ProgressUnit unit, ProgressOptions opt = {});
  ~Progress();  // finishes, if finish() was not called
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // done of total so far, with a note (the tensor, the running perplexity).
  // Cheap to call often: it draws only when due.
  void update(double done, std::string_view note = {});
  void set_total(double total) { total_ = total; }
  // The last state (done = total, with `note` in place of the last update's)
  // and a newline; the plain form's "done" line.
  void finish(std::string_view note = {});
  // Ends without a "done" (the work failed; its error says why): a terminal's
  // bar line is closed, nothing more is drawn.
  void abandon();

 private:
  void draw(bool final);
  double now() const;

  std::string label_;
  double total_, done_ = 0;
  ProgressUnit unit_;
  ProgressOptions opt_;
  bool tty_ = false, finished_ = false;
  double start_ = 0, last_draw_ = -1e9;
  std::string note_;
};

// Polls `done()` every 100 ms on a thread of its own and updates a Progress:
// for work that cannot call back (loading a model: the engine counts the
// weight bytes it has prepared). stop() (or the destructor) finishes the bar.
class ProgressPoller {
 public:
  ProgressPoller(Progress& p, std::function<double()> done);
  ~ProgressPoller();
  void stop(bool finish = true);  // finish: then the bar's finish()

 private:
  Progress& p_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// "loading NAME" while a model loads (and its experts are repacked): the
// weight bytes the engine has prepared for the kernels so far
// (weights_prepared_bytes) of the file's size. Finishes when destroyed.
class LoadProgress {
 public:
  LoadProgress(const std::string& path, bool quiet);
  ~LoadProgress();  // a load that throws leaves no "done" line before its error

 private:
  int uncaught_ = std::uncaught_exceptions();
  Progress bar_;
  ProgressPoller poller_;  // after bar_: stopped (and the bar finished) first
};

}  // namespace moelsp::cli
