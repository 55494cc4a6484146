// Tokenizer throughput (MB/s) per tokenizer family on a large source file,
// optionally against llama.cpp's llama-tokenize on the same input and vocab.
//
//   moelsp_bench_tokenizer [--file BIG.txt] [--vocab-dir DIR] [--llama-tokenize PATH]
//
// The peer is timed as a whole process; its start-up and vocabulary load are
// measured on a one-byte input and subtracted, so both columns are encode time
// (the peer's also includes printing the ids to /dev/null). The ratio compares
// moelsp's cold-cache throughput with the peer's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/gguf.h"
#include "engine/tokenizer.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Default input: ~8 MB of distinct C++ (this repository's sources, then the
// libstdc++ headers that every Debian machine with g++ has), never repeated, so
// that a word cache does not get an unfair share of hits.
std::string default_corpus() {
  std::string text;
  std::vector<fs::path> files;
  for (const char* dir : {"/engine", "/kernels", "/server", "/tests", "/bench"})
    for (const auto& e : fs::recursive_directory_iterator(std::string(MOELSP_SOURCE_DIR) + dir))
      if (e.is_regular_file() && (e.path().extension() == ".cpp" || e.path().extension() == ".h"))
        files.push_back(e.path());
  if (fs::exists("/usr/include/c++/12"))
    for (const auto& e : fs::recursive_directory_iterator("/usr/include/c++/12"))
      if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    if (text.size() >= (8u << 20)) break;
    text += read(f);
  }
  return text;
}

double seconds_of(const std::string& cmd) {
  const auto t0 = Clock::now();
  const int rc = std::system(cmd.c_str());
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return rc == 0 ? s : -1.0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moelsp tokenizer throughput"};
  std::string file, vocab_dir = std::string(MOELSP_SOURCE_DIR) + "/tests/data/vocab", peer;
  int repeats = 3;
  app.add_option("--file", file, "Input text (default: ~8 MB of C++ source)");
  app.add_option("--vocab-dir", vocab_dir, "Directory with ggml-vocab-*.gguf files")->capture_default_str();
  app.add_option("--llama-tokenize", peer, "Path to llama.cpp's llama-tokenize, to measure the peer in the same run");
  app.add_option("--repeats", repeats, "Timed runs per vocabulary (best is reported)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const std::string text = file.empty() ? default_corpus() : read(file);
  const fs::path input = fs::temp_directory_path() / "moelsp_bench_tok_input.txt";
  const fs::path tiny = fs::temp_directory_path() / "moelsp_bench_tok_tiny.txt";
  std::ofstream(input, std::ios::binary) << text;
  std::ofstream(tiny, std::ios::binary) << "x";
  const double mb = text.size() / 1e6;
  fmt::print("input: {:.2f} MB{}\n", mb, file.empty() ? " (repository sources + libstdc++ headers)" : "");
  fmt::print("{:<34} {:>6} {:>9} {:>12} {:>12} {:>10} {:>7}\n", "vocabulary", "family", "tokens", "moelsp MB/s",
             "(warm MB/s)", "peer MB/s", "ratio");

  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-deepseek-coder.gguf", "ggml-vocab-gpt-2.gguf",
                           "ggml-vocab-starcoder.gguf", "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-falcon.gguf"}) {
    const fs::path vp = fs::path(vocab_dir) / name;
    if (!fs::exists(vp)) {
      fmt::print("{:<34} missing\n", name);
      continue;
    }
    // Cold: a fresh tokenizer (empty word cache) per run, as the peer always is.
    // Warm: the same text again on a tokenizer that has seen it (an editor re-sending a prompt).
    const auto f = moelsp::gguf::File::open(vp.string());
    double best = 1e30, warm = 0;
    size_t n_tokens = 0;
    for (int r = 0; r < repeats; ++r) {
      const auto tok = moelsp::Tokenizer::from_gguf(f);
      auto t0 = Clock::now();
      n_tokens = tok->encode(text).size();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
      t0 = Clock::now();
      (void)tok->encode(text);
      warm = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    const auto tok = moelsp::Tokenizer::from_gguf(f);
    std::string peer_col = "-", ratio_col = "-";
    if (!peer.empty()) {
      const std::string base =
          fmt::format("'{}' -m '{}' --ids --log-disable --no-escape --no-parse-special -f ", peer, vp.string());
      const double t_tiny = seconds_of(base + "'" + tiny.string() + "' > /dev/null 2>&1");
      double t_full = 1e30;
      for (int r = 0; r < repeats; ++r)
        t_full = std::min(t_full, seconds_of(base + "'" + input.string() + "' > /dev/null 2>&1"));
      if (t_tiny >= 0 && t_full > 0 && t_full > t_tiny) {
        const double peer_mbs = mb / (t_full - t_tiny);
        peer_col = fmt::format("{:.2f}", peer_mbs);
        ratio_col = fmt::format("{:.2f}x", (mb / best) / peer_mbs);
      } else {
        peer_col = "failed";
      }
    }
    fmt::print("{:<34} {:>6} {:>9} {:>12.2f} {:>12.2f} {:>10} {:>7}\n", name, tok->model(), n_tokens, mb / best,
               mb / warm, peer_col, ratio_col);
  }
  fs::remove(input);
  fs::remove(tiny);
  return 0;
}
