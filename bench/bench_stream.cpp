// Decoding a model larger than the memory the process may use: experts stream
// from the file. Compares, in alternating rounds, each run in a fresh child
// process inside a memory cgroup with the model's pages dropped from the page
// cache first:
//   off       no prediction, no prefetch, no hot cache (faults + the kernel's readahead, as a plain mmap)
//   prefetch  layer l+d's experts predicted at layer l and requested on a helper thread
//   plan      what the automatic plan chooses under the limit (prefetch + hot-expert cache)
//   peer      llama.cpp's llama-bench on the same file and limit (mmap), with --peer PATH
// and reports tokens/s, major page faults, per-layer prediction accuracy
// (against the previous token's experts) and the hot cache's hit rate.
//
//   moelsp_bench_stream -m FILE --mem-limit-mb 1500 [--gen 32] [-t 2] [--rounds 2] [--peer llama-bench]
//
// Needs root for the cgroup (v1 memory controller or v2 memory.max); without
// it (or with --mem-limit-mb 0) runs unlimited and says so.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/hw.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "engine/profile.h"

using namespace moelsp;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Options {
  std::string model, peer;
  std::string text = std::string(MOELSP_SOURCE_DIR) + "/tests/data/default-model/slice.txt";
  int64_t limit_mb = 0;
  int gen = 32, threads = 0, rounds = 2, distance = 0;
  std::vector<std::string> modes{"off", "prefetch", "plan"};
};

// A memory cgroup holding one child; removed when done.
struct Cgroup {
  std::string dir, procs;
  bool ok = false;
  std::string why;

  Cgroup(const std::string& name, int64_t limit_bytes) {
    if (limit_bytes <= 0) {
      why = "no limit asked";
      return;
    }
    const auto write = [](const std::string& f, const std::string& v) {
      std::ofstream o(f);
      o << v;
      o.close();
      return bool(o);
    };
    if (fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")) {  // v1
      dir = "/sys/fs/cgroup/memory/" + name;
      std::error_code ec;
      fs::create_directory(dir, ec);
      // No swapping the hot copies out: they would come back slower than the file.
      write(dir + "/memory.swappiness", "0");
      ok = write(dir + "/memory.limit_in_bytes", std::to_string(limit_bytes));
      procs = dir + "/cgroup.procs";
    } else if (fs::exists("/sys/fs/cgroup/cgroup.controllers")) {  // v2
      dir = "/sys/fs/cgroup/" + name;
      std::error_code ec;
      fs::create_directory(dir, ec);
      ok = write(dir + "/memory.max", std::to_string(limit_bytes));
      write(dir + "/memory.swap.max", "0");
      procs = dir + "/cgroup.procs";
    }
    if (!ok) why = "cannot create a memory cgroup (root and a memory controller are needed)";
  }
  bool join() const {
    std::ofstream o(procs);
    o << getpid();
    o.close();
    return bool(o);
  }
  int64_t max_usage() const {
    std::ifstream in(dir +
                     (fs::exists(dir + "/memory.max_usage_in_bytes") ? "/memory.max_usage_in_bytes" : "/memory.peak"));
    int64_t v = 0;
    in >> v;
    return v;
  }
  ~Cgroup() {
    if (!dir.empty()) rmdir(dir.c_str());
  }
};

void drop_file_cache(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

// In the child: load, configure for `mode`, decode, report.
json run_ours(const Options& o, const std::string& mode) {
  ProfileOptions po;
  po.model_path = o.model;
  PlanRequest req;
  req.concurrency = 1;
  req.n_ctx = 512;
  if (o.threads > 0) req.over.threads = o.threads;
  PlannedModel pm = load_planned(o.model, req, po);  // sees this cgroup's limit
  Model& m = *pm.model;
  ExpertOptions eo = pm.plan.expert_options();
  eo.populate = false;  // under the limit the point is not to read the whole file
  if (o.distance > 0) eo.distance = o.distance;
  if (mode == "off") eo = ExpertOptions{};
  if (mode == "prefetch") eo.cache_bytes = 0;
  if (mode == "predict") eo = {.predict = true, .distance = eo.distance};
  m.configure_experts(eo);
  m.reset_expert_metrics();
  auto cache = m.new_cache(o.gen + 1);
  const int nv = m.config().n_vocab;
  std::vector<float> logits(static_cast<size_t>(nv));
  // Teacher-forced code tokens, one per step: a random-weight model's greedy
  // output repeats one token, which would make routing unrealistically repetitive.
  std::ifstream in(o.text, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::vector<TokenId> toks = m.tokenizer().encode(ss.str());
  if (toks.size() < size_t(o.gen)) throw std::runtime_error(o.text + ": too short for --gen tokens");
  std::vector<double> step_ms;
  for (int i = 0; i < o.gen; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(std::span(&toks[size_t(i)], 1), *cache, logits.data(), false);
    step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const ExpertMetrics em = m.expert_metrics();
  double total = 0, second_half = 0;
  for (size_t i = 0; i < step_ms.size(); ++i) {
    total += step_ms[i];
    if (i >= step_ms.size() / 2) second_half += step_ms[i];
  }
  json layers = json::array();
  for (size_t il = 0; il < em.layers.size(); ++il) {
    const auto& l = em.layers[il];
    if (l.tokens)
      layers.push_back({{"layer", il},
                        {"accuracy", double(l.predicted_hits) / double(l.tokens * em.k)},
                        {"previous", double(l.baseline_hits) / double(l.tokens * em.k)},
                        {"chosen", double(l.chosen_hits) / double(l.tokens * em.k)}});
  }
  return {{"mode", mode},
          {"tps", o.gen / (total / 1e3)},
          {"tpsSecondHalf", double(o.gen - o.gen / 2) / (second_half / 1e3)},
          {"majorFaults", em.major_faults},
          {"minorFaults", em.minor_faults},
          {"accuracy", em.accuracy()},
          {"previousAccuracy", em.baseline_accuracy()},
          {"chosenAccuracy", em.chosen_accuracy()},
          {"cacheExperts", em.cache_experts},
          {"cacheHitRate", em.cache_hit_rate()},
          {"prefetchMB", double(em.prefetch_missing_bytes) / (1 << 20)},
          {"distance", em.distance},
          {"layers", layers},
          {"peakRssMB", double(peak_rss_bytes()) / (1 << 20)},
          {"plan", pm.plan.to_text()}};
}

// In the child: exec llama-bench; its stdout (jsonl) comes back through the pipe.
[[noreturn]] void exec_peer(const Options& o, int out_fd) {
  dup2(out_fd, STDOUT_FILENO);
  const int devnull = open("/dev/null", O_WRONLY);
  dup2(devnull, STDERR_FILENO);
  const std::string n = std::to_string(o.gen), t = std::to_string(o.threads > 0 ? o.threads : physical_core_count());
  execl(o.peer.c_str(), o.peer.c_str(), "-m", o.model.c_str(), "-p", "0", "-n", n.c_str(), "-t", t.c_str(), "-r", "1",
        "--no-warmup", "-o", "jsonl", static_cast<char*>(nullptr));
  _exit(127);
}

json run_child(const Options& o, const std::string& mode, int round) {
  Cgroup cg(fmt::format("moelsp_bench_{}_{}_{}", getpid(), mode, round), o.limit_mb << 20);
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  drop_file_cache(o.model);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (cg.ok && !cg.join()) _exit(3);
    if (mode == "peer") exec_peer(o, fds[1]);
    std::string out;
    try {
      out = run_ours(o, mode).dump();
    } catch (const std::exception& e) {
      out = json{{"mode", mode}, {"error", e.what()}}.dump();
    }
    out += "\n";
    (void)!write(fds[1], out.data(), out.size());
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t r; (r = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, size_t(r));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  json j;
  if (mode == "peer") {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      const json l = json::parse(line, nullptr, false);
      if (l.is_object() && l.contains("avg_ts")) j = {{"mode", "peer"}, {"tps", l["avg_ts"].get<double>()}};
    }
    if (j.is_null()) j = {{"mode", "peer"}, {"error", fmt::format("llama-bench gave no result (status {})", status)}};
  } else {
    j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      j = {{"mode", mode}, {"error", fmt::format("child ended with status {} (killed by the memory limit?)", status)}};
  }
  j["cgroup"] = cg.ok ? fmt::format("{} MiB", o.limit_mb) : cg.why;
  j["cgroupPeakMB"] = cg.ok ? double(cg.max_usage()) / (1 << 20) : 0.0;
  return j;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Decode with experts streamed from the file under a memory limit: prefetch off/on, the plan, llama.cpp"};
  Options o;
  app.add_option("-m,--model", o.model, "GGUF model (larger than the limit)")->required();
  app.add_option("--mem-limit-mb", o.limit_mb, "Memory cgroup limit for each run (0: none)")->capture_default_str();
  app.add_option("-n,--gen", o.gen, "Tokens decoded per run")->capture_default_str();
  app.add_option("-t,--threads", o.threads, "Threads (default: physical cores)");
  app.add_option("--rounds", o.rounds, "Alternating rounds (medians reported)")->capture_default_str();
  app.add_option("--distance", o.distance, "Prediction distance in layers (default: the plan's)");
  app.add_option("--modes", o.modes, "Runs per round: off, predict, prefetch, plan")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--text", o.text, "Text whose tokens are fed one per step")->capture_default_str();
  app.add_option("--peer", o.peer, "llama.cpp's llama-bench, run on the same file under the same limit");
  CLI11_PARSE(app, argc, argv);
  keep_freed_memory();

  std::vector<std::string> modes = o.modes;
  if (!o.peer.empty()) modes.push_back("peer");
  std::map<std::string, std::vector<json>> runs;
  for (int r = 0; r < o.rounds; ++r)
    for (const std::string& mode : modes) {
      json j = run_child(o, mode, r);
      std::fprintf(stderr, "round %d %-9s %s\n", r + 1, mode.c_str(),
                   j.contains("error") ? j["error"].get<std::string>().c_str()
                                       : fmt::format("{:.2f} tokens/s", j["tps"].get<double>()).c_str());
      runs[mode].push_back(std::move(j));
    }

  std::printf("model %s (%.2f GiB), limit %s, %d tokens per run, %d round(s)\n\n", o.model.c_str(),
              double(fs::file_size(o.model)) / (1 << 30), runs.begin()->second[0]["cgroup"].get<std::string>().c_str(),
              o.gen, o.rounds);
  std::printf("%-9s %9s %9s %11s %9s %9s %9s %11s %11s %9s\n", "mode", "tok/s", "2nd half", "major flt", "router",
              "prev tok", "used", "cache hits", "read ahead", "peak MB");
  double off_tps = 0;
  for (const std::string& mode : modes) {
    std::vector<double> tps, tps2, faults, acc, prev, used, hits, pref, peak;
    for (const json& j : runs[mode]) {
      if (j.contains("error")) continue;
      tps.push_back(j["tps"]);
      if (j.contains("tpsSecondHalf")) {
        tps2.push_back(j["tpsSecondHalf"]);
        faults.push_back(j["majorFaults"]);
        acc.push_back(j["accuracy"]);
        prev.push_back(j["previousAccuracy"]);
        used.push_back(j["chosenAccuracy"]);
        hits.push_back(j["cacheHitRate"]);
        pref.push_back(j["prefetchMB"]);
      }
      peak.push_back(j["cgroupPeakMB"]);
    }
    if (tps.empty()) {
      std::printf("%-9s failed: %s\n", mode.c_str(), runs[mode][0].value("error", std::string("?")).c_str());
      continue;
    }
    if (mode == "off") off_tps = median(tps);
    std::printf("%-9s %9.2f %9s %11.0f %8.1f%% %8.1f%% %8.1f%% %10.1f%% %11.0f %9.0f%s\n", mode.c_str(), median(tps),
                tps2.empty() ? "-" : fmt::format("{:.2f}", median(tps2)).c_str(), median(faults), 100 * median(acc),
                100 * median(prev), 100 * median(used), 100 * median(hits), median(pref), median(peak),
                off_tps > 0 && mode != "off" ? fmt::format("   {:.2f}x off", median(tps) / off_tps).c_str() : "");
  }
  // Per-layer accuracy and the plan, from the last run that predicted.
  for (const std::string mode : {"plan", "prefetch", "predict"}) {
    if (runs[mode].empty() || runs[mode].back().contains("error")) continue;
    const json& j = runs[mode].back();
    std::printf("\nprediction accuracy per layer (distance %d): router / previous token's experts / the one used\n",
                j["distance"].get<int>());
    for (const json& l : j["layers"])
      std::printf("  layer %2d: %5.1f%% / %5.1f%% / %5.1f%%\n", l["layer"].get<int>(),
                  100 * l["accuracy"].get<double>(), 100 * l["previous"].get<double>(),
                  100 * l["chosen"].get<double>());
    std::printf("\nplan under the limit:\n%s", j["plan"].get<std::string>().c_str());
    break;
  }
  return 0;
}
