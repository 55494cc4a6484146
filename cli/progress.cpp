#include "progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "engine/model.h"

namespace moelsp::cli {

namespace {

constexpr double kRedrawS = 0.1;  // a terminal bar: at most 10 draws a second

const char* const kByteUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};

// The binary unit a byte count reads best in: 1024^i.
int byte_unit(double v) {
  int i = 0;
  while (v >= 1024 && i < 4) v /= 1024, ++i;
  return i;
}

// v in 1024^i with 3 significant digits (bytes: a whole number).
std::string scaled(double v, int i) {
  v /= std::pow(1024.0, i);
  return fmt::format("{:.{}f}", v, i == 0 ? 0 : v < 10 ? 2 : v < 100 ? 1 : 0);
}

// Bytes in binary units; counts as integers.
std::string amount(double v, ProgressUnit u) {
  if (u == ProgressUnit::Count) return fmt::format("{:.0f}", v);
  const int i = byte_unit(v);
  return scaled(v, i) + " " + kByteUnits[i];
}

// "done/total unit" with the unit once, both in the total's: 1.2/2.4 GiB, 12/290 tensors.
std::string of_total(double done, double total, ProgressUnit u, std::string_view name, std::string_view sep) {
  if (u == ProgressUnit::Count)
    return fmt::format("{:.0f}{}{:.0f}{}{}", done, sep, total, name.empty() ? "" : " ", name);
  const int i = byte_unit(total);
  return fmt::format("{}{}{} {}", scaled(done, i), sep, scaled(total, i), kByteUnits[i]);
}

std::string clock_text(double s) {
  const auto t = int64_t(std::llround(std::max(0.0, s)));
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

std::string rate_text(const ProgressState& s) {
  if (s.elapsed_s <= 0 || s.done <= 0) return {};
  const double r = s.done / s.elapsed_s;
  if (s.unit == ProgressUnit::Bytes) return amount(r, s.unit) + "/s";
  const std::string name = s.unit_name.empty() ? std::string() : " " + std::string(s.unit_name);
  return r >= 10 ? fmt::format("{:.0f}{}/s", r, name) : fmt::format("{:.2f}{}/s", r, name);
}

// Remaining time at the average rate so far; empty until there is one.
std::string eta_text(const ProgressState& s) {
  if (s.elapsed_s <= 0 || s.done <= 0 || s.total <= s.done) return {};
  return "ETA " + clock_text((s.total - s.done) * s.elapsed_s / s.done);
}

int terminal_width(std::FILE* f) {
  winsize w{};
  if (ioctl(fileno(f), TIOCGWINSZ, &w) == 0 && w.ws_col > 20) return w.ws_col;
  return 80;
}

// Cuts to `width` columns, counting UTF-8 code points (the notes are tensor
// names and numbers: no wide characters).
std::string fit(std::string s, int width) {
  int cols = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && ++cols > width) return s.substr(0, i);
  return s;
}

}  // namespace

std::string progress_text(const ProgressState& s, bool bar, int width) {
  const double frac = s.total > 0 ? std::clamp(s.done / s.total, 0.0, 1.0) : 0.0;
  const std::string rate = rate_text(s), eta = eta_text(s);
  if (bar) {
    // The bar gives way to the numbers and the note on a narrow terminal.
    const int kCells = std::clamp((width - 64) / 2, 10, 24);
    const int full = int(frac * kCells);
    std::string line = fmt::format("{} [{}{}] {:3.0f}% {}", s.label, std::string(size_t(full), '#'),
                                   std::string(size_t(kCells - full), '.'), frac * 100,
                                   of_total(s.done, s.total, s.unit, s.unit_name, "/"));
    if (!rate.empty()) line += "  " + rate;
    line += s.finished ? "  " + clock_text(s.elapsed_s) : eta.empty() ? std::string() : "  " + eta;
    if (!s.note.empty()) line += "  " + std::string(s.note);
    return fit(line, width);
  }
  if (s.finished) {
    std::string line = fmt::format("{}: done, {} in {}", s.label, amount(s.total, s.unit), clock_text(s.elapsed_s));
    if (s.unit == ProgressUnit::Count && !s.unit_name.empty())
      line.insert(line.find(" in "), " " + std::string(s.unit_name));
    if (!rate.empty()) line += " (" + rate + ")";
    if (!s.note.empty()) line += " " + std::string(s.note);
    return line;
  }
  std::string paren = of_total(s.done, s.total, s.unit, s.unit_name, " of ");
  if (!rate.empty()) paren += ", " + rate;
  if (!eta.empty()) paren += ", " + eta;
  std::string line = fmt::format("{}: {:.0f}% ({})", s.label, frac * 100, paren);
  if (!s.note.empty()) line += " " + std::string(s.note);
  return line;
}

Progress::Progress(std::string label, double total, ProgressUnit unit, ProgressOptions opt)
    : label_(std::move(label)), total_(total), unit_(unit), opt_(std::move(opt)) {
  tty_ = opt_.tty >= 0 ? opt_.tty != 0 : isatty(fileno(opt_.out)) != 0;
  start_ = now();
}

Progress::~Progress() { finish(); }

double Progress::now() const {
  if (opt_.clock) return opt_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Progress::update(double done, std::string_view note) {
  if (opt_.quiet || finished_) return;
  done_ = done;
  note_ = note;
  const double t = now();
  if (t - last_draw_ < (tty_ ? kRedrawS : opt_.every_s)) return;
  // Plain lines: the first is due a whole interval after the start, so short work prints only its "done" line.
  if (!tty_ && last_draw_ < -1e8) {
    last_draw_ = start_;
    if (t - last_draw_ < opt_.every_s) return;
  }
  last_draw_ = t;
  draw(false);
}

void Progress::finish(std::string_view note) {
  if (opt_.quiet || finished_) return;
  finished_ = true;
  if (total_ <= 0 || done_ > total_) total_ = done_;
  done_ = total_;
  note_ = note;  // the last item's note (a tensor's name) says nothing about the whole
  draw(true);
}

void Progress::abandon() {
  if (opt_.quiet || finished_) return;
  finished_ = true;
  if (tty_ && last_draw_ > -1e8) {
    std::fputc('\n', opt_.out);
    std::fflush(opt_.out);
  }
}

void Progress::draw(bool final) {
  const ProgressState s{.label = label_,
                        .done = done_,
                        .total = total_,
                        .elapsed_s = now() - start_,
                        .unit = unit_,
                        .unit_name = opt_.unit_name,
                        .note = note_,
                        .finished = final};
  if (tty_) {
    // \r and erase-to-end-of-line: the bar redraws in place; one column spare so no terminal wraps.
    std::fprintf(opt_.out, "\r%s\x1b[K%s", progress_text(s, true, terminal_width(opt_.out) - 1).c_str(),
                 final ? "\n" : "");
  } else {
    std::fprintf(opt_.out, "%s\n", progress_text(s, false).c_str());
  }
  std::fflush(opt_.out);
}

ProgressPoller::ProgressPoller(Progress& p, std::function<double()> done) : p_(p) {
  thread_ = std::thread([this, done = std::move(done)] {
    while (!stop_.load()) {
      p_.update(done());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

ProgressPoller::~ProgressPoller() { stop(); }

void ProgressPoller::stop(bool finish) {
  if (stop_.exchange(true)) return;
  thread_.join();
  if (finish) p_.finish();
}

namespace {
double file_bytes(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0.0 : double(n);
}
}  // namespace

LoadProgress::LoadProgress(const std::string& path, bool quiet)
    : bar_("loading " + std::filesystem::path(path).filename().string(), file_bytes(path), ProgressUnit::Bytes,
           {.quiet = quiet}),
      poller_(bar_, [start = weights_prepared_bytes()] { return double(weights_prepared_bytes() - start); }) {}

LoadProgress::~LoadProgress() {
  const bool failed = std::uncaught_exceptions() > uncaught_;
  poller_.stop(!failed);
  if (failed) bar_.abandon();
}

}  // namespace moelsp::cli
