// moelsp_bench_index: the workspace index on a real tree — cold walk time,
// memory, and the time one completion's context query takes.
//
//   moelsp_bench_index DIR [--max-files 20000] [--queries 300] [--budget 3072] [--json FILE]
//
// The walk is the language server's (assist::WorkspaceIndex::start, its
// background thread at nice 10, here on an otherwise idle machine): every
// source file under DIR that .gitignore, the exclude defaults and the size,
// binary and generated rules let through, cut into chunks and indexed. The
// memory is the process's resident set grown by the walk (VmRSS; the file
// text is not kept, so this is the index's own) beside the index's estimate
// from its containers. The queries are completions' questions
// (WorkspaceIndex::context_for): a cursor at the start of a random line of a
// random indexed file, with the 6,000 bytes before it and 400 after it as the
// language server reads them, and a budget of --budget bytes of snippets.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "assist/workspace_index.h"

using namespace moelsp;
namespace fs = std::filesystem;

namespace {

uint64_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return uint64_t(std::stoull(line.substr(6))) * 1024;
  return 0;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"moelsp_bench_index: the workspace index's cold walk, memory and query time on a real tree"};
  std::string dir, json_out;
  size_t max_files = 20000, queries = 300, budget = 3072;
  app.add_option("dir", dir, "the tree to index (e.g. /usr/include/boost, 15 k files)")->required();
  app.add_option("--max-files", max_files, "workspace.maxFiles");
  app.add_option("--queries", queries, "context queries timed");
  app.add_option("--budget", budget, "bytes of snippets per query (1024 tokens × 3)");
  app.add_option("--json", json_out, "write the figures here");
  CLI11_PARSE(app, argc, argv);
  dir = fs::canonical(dir).string();

  const uint64_t rss0 = rss_bytes();
  assist::WorkspaceIndex index;
  const auto t0 = std::chrono::steady_clock::now();
  index.start({.roots = {dir}, .max_files = max_files});
  index.wait_idle();
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t rss1 = rss_bytes();
  const assist::IndexStats s = index.stats();
  std::printf("walk: %zu files (%.1f MiB of text), %zu chunks, %zu terms, %zu postings in %.0f ms\n", s.files,
              double(s.bytes) / 1048576.0, s.chunks, s.terms, s.postings, wall_ms);
  std::printf(
      "skipped: %zu ignored or vendor, %zu excluded, %zu over 1 MiB, %zu binary, %zu generated, %zu over the "
      "file limit\n",
      s.skipped_ignored, s.skipped_excluded, s.skipped_large, s.skipped_binary, s.skipped_generated, s.skipped_limit);
  std::printf("memory: resident set +%.1f MiB; the index's estimate %.1f MiB (%.0f bytes per file)\n",
              double(rss1 - rss0) / 1048576.0, double(s.memory_bytes) / 1048576.0,
              double(s.memory_bytes) / double(std::max<size_t>(1, s.files)));

  // Cursors in random files of the tree (the same files the walk read: source names, under the size limit).
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied);
       it != fs::recursive_directory_iterator(); ++it) {
    std::error_code ec;
    if (it->is_regular_file(ec) && it->file_size(ec) < (1 << 20) && it->path().extension() != "")
      files.push_back(it->path().string());
  }
  std::mt19937_64 rng(42);
  std::vector<double> ms;
  size_t with = 0, snippets = 0;
  for (size_t q = 0; q < queries && !files.empty(); ++q) {
    const std::string& path = files[rng() % files.size()];
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    size_t cursor = text.empty() ? 0 : rng() % text.size();
    cursor = text.rfind('\n', cursor) == std::string::npos ? 0 : text.rfind('\n', cursor) + 1;
    const size_t b = cursor > 6000 ? cursor - 6000 : 0;
    const std::string_view prefix = std::string_view(text).substr(b, cursor - b);
    const std::string_view suffix = std::string_view(text).substr(cursor, 400);
    const auto q0 = std::chrono::steady_clock::now();
    const assist::RepoContext c = index.context_for(
        {.path = path, .prefix = prefix, .suffix = suffix, .budget_bytes = budget}, assist::exclude_list(std::nullopt));
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - q0).count());
    with += !c.snippets.empty();
    snippets += c.snippets.size();
  }
  std::printf("queries: %zu, p50 %.2f ms, p95 %.2f ms, max %.2f ms; %zu with context, %.1f snippets each\n", ms.size(),
              percentile(ms, 0.5), percentile(ms, 0.95), percentile(ms, 1.0), with,
              double(snippets) / double(std::max<size_t>(1, ms.size())));
  if (!json_out.empty()) {
    const nlohmann::json j = {{"dir", dir},
                              {"files", s.files},
                              {"bytes", s.bytes},
                              {"chunks", s.chunks},
                              {"terms", s.terms},
                              {"postings", s.postings},
                              {"walk_ms", wall_ms},
                              {"rss_growth_bytes", rss1 - rss0},
                              {"index_memory_bytes", s.memory_bytes},
                              {"query_p50_ms", percentile(ms, 0.5)},
                              {"query_p95_ms", percentile(ms, 0.95)},
                              {"queries_with_context", with}};
    std::ofstream(json_out) << j.dump(2) << "\n";
  }
  return 0;
}
