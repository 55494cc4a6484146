// moelsp bench: prompt processing and decode speed of a model, peak memory,
// the memory-bandwidth roofline for decode, and optionally llama.cpp's
// llama-bench on the same file and thread count in the same run. With
// --background-load N both are measured again while N other processes each
// keep a core busy (an editor, a compiler, a browser tab): an engine whose
// threads wait for each other at every layer slows down far more than the
// share of the machine it lost.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "engine/gguf.h"
#include "engine/hw.h"
#include "engine/kv_type.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "engine/profile.h"
#include "kernels/cuda.h"
#include "options.h"
#include "progress.h"

namespace moelsp::cli {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Bytes a decode step of `streams` sequences reads: every dense tensor once,
// routed experts for the fraction a step's tokens touch (1 − (1 − k/n)^streams
// of them, with uniform routing), the embedding one row per token (unless it
// doubles as lm_head).
double bytes_per_step(const Model& m, int streams = 1) {
  const auto& c = m.config();
  const bool tied = m.file().tensor("output.weight") == nullptr;
  const double touched =
      c.n_expert > 0 ? 1.0 - std::pow(1.0 - double(c.n_expert_used) / double(c.n_expert), streams) : 0.0;
  double b = 0;
  for (const auto& t : m.file().tensors()) {
    if (t.name == "token_embd.weight") b += tied ? double(t.n_bytes) : double(t.n_bytes) * streams / double(c.n_vocab);
    else if (t.name.find("_exps.") != std::string::npos && c.n_expert > 0) b += double(t.n_bytes) * touched;
    else b += double(t.n_bytes);
  }
  return b;
}

// Memory bandwidth (GB/s) measured in a child process: this executable
// again, started with MOELSP_BANDWIDTH_PROBE=<threads> (bandwidth_probe_child
// answers at the top of main). The probe's 512 MiB buffer then counts in
// neither this process's peak RSS nor its heap, so the bench can probe before
// and after every decode run. posix_spawn, not fork: after a fork every page
// of this process stays copy-on-write until written once more, and the next
// prompt paid a page fault per page of its buffers (pp512 at half speed).
// The VM this was written on moves its bandwidth by ±25 % within seconds;
// decode's share of the roofline is taken per run against the mean of the
// probes around it.
double probe_bandwidth(int threads) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return measure_memory_bandwidth_gbs(threads);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  env_s.push_back(fmt::format("MOELSP_BANDWIDTH_PROBE={}", threads));
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  char exe[] = "/proc/self/exe";
  char* argv[] = {exe, nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe, &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  std::string out;
  char buf[64];
  for (ssize_t n; rc == 0 && (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  if (rc == 0) waitpid(pid, &status, 0);
  double bw = 0;
  if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || std::sscanf(out.c_str(), "%lf", &bw) != 1 || bw <= 0)
    return measure_memory_bandwidth_gbs(threads);
  return bw;
}

struct PeerResult {
  double pp = 0, tg = 0;
  std::string error;
};

PeerResult run_peer(const BenchOptions& o, int threads, const ModelConfig& c) {
  PeerResult r;
  // On a GPU: every layer offloaded. With fewer experts resident, llama.cpp's
  // --n-cpu-moe keeps whole layers' experts on the CPU, not some experts of
  // every layer: the same share of expert bytes in VRAM is its nearest like
  // for like (n_moe_layers × (1 − resident / n_expert) layers, rounded).
  std::string gpu;
  if (o.backend == "cuda") {
    gpu = " -ngl 99";
    if (o.gpu_experts >= 0 && c.n_expert > 0) {
      const int moe_layers = c.n_layer - c.n_layer_dense_lead;
      gpu +=
          fmt::format(" -ncmoe {}",
                      int(std::lround(moe_layers * (1.0 - double(std::min(o.gpu_experts, c.n_expert)) / c.n_expert))));
    }
  }
  const std::string cmd =
      fmt::format("'{}' -m '{}' -p {} -n {} -d {} -t {} -r {} -ctk {} -ctv {}{}{} -o json 2>/dev/null", o.peer, o.model,
                  o.n_prompt, o.n_gen, o.n_depth, threads, o.reps, o.kv_type, o.kv_type,
                  o.kv_type == "q8_0" ? " -fa on" : "",  // llama.cpp's quantized V cache needs flash attention
                  gpu);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    r.error = "cannot run " + o.peer;
    return r;
  }
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = pclose(p);
  const auto j = nlohmann::json::parse(out, nullptr, false);
  if (rc != 0 || !j.is_array()) {
    r.error = fmt::format("{} failed (exit {})", o.peer, rc);
    return r;
  }
  for (const auto& row : j) {
    if (row.value("n_prompt", 0) > 0 && row.value("n_gen", 0) == 0) r.pp = row.value("avg_ts", 0.0);
    if (row.value("n_gen", 0) > 0 && row.value("n_prompt", 0) == 0) r.tg = row.value("avg_ts", 0.0);
  }
  return r;
}

// N busy processes (`sh -c 'while :; do :; done'`), killed when this ends.
class BackgroundLoad {
 public:
  explicit BackgroundLoad(int n) {
    for (int i = 0; i < n; ++i) {
      pid_t pid = 0;
      char sh[] = "/bin/sh", c[] = "-c", loop[] = "while :; do :; done";
      char* argv[] = {sh, c, loop, nullptr};
      if (posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv, environ) != 0)
        throw std::runtime_error("--background-load: cannot start /bin/sh");
      pids_.push_back(pid);
    }
  }
  ~BackgroundLoad() {
    for (pid_t p : pids_) kill(p, SIGKILL);
    for (pid_t p : pids_) waitpid(p, nullptr, 0);
  }
  BackgroundLoad(const BackgroundLoad&) = delete;
  BackgroundLoad& operator=(const BackgroundLoad&) = delete;

 private:
  std::vector<pid_t> pids_;
};

}  // namespace

int bandwidth_probe_child(const char* threads) {
  std::printf("%.3f\n", measure_memory_bandwidth_gbs(std::max(1, std::atoi(threads))));
  return 0;
}

int bench(const BenchOptions& o) {
  try {
    std::unique_ptr<Model> model;
    {
      const LoadProgress loading(o.model, o.quiet);
      const ComputeBackend be = o.backend == "cuda"       ? ComputeBackend::Cuda
                                : o.backend == "emulated" ? ComputeBackend::Emulated
                                                          : ComputeBackend::Cpu;
      model = Model::load(o.model,
                          {.threads = o.threads, .backend = be, .gpu = o.gpu, .gpu_experts_per_layer = o.gpu_experts});
      // As the editor and the server load it: experts repacked when the plan holds them in RAM.
      if (be == ComputeBackend::Cpu &&
          make_plan(hardware_profile(), footprint(*model), {}).weights == WeightPlacement::Ram)
        model->repack_experts();
    }
    const auto& c = model->config();
    if (c.n_ctx_train > 0 && o.n_depth + std::max(o.n_prompt, o.n_gen) >= c.n_ctx_train)
      throw std::runtime_error(
          fmt::format("-d {} plus -p {} / -n {}: each must stay below the model's training context of {} tokens",
                      o.n_depth, o.n_prompt, o.n_gen, c.n_ctx_train));
    if (o.n_prompt == 0 && o.n_gen == 0 && o.streams.empty())
      throw std::runtime_error("-p 0 and -n 0 without --streams: nothing to measure");
    const int threads = model->threads();
    std::mt19937 rng(1);
    std::vector<TokenId> prompt(size_t(o.n_prompt));
    for (auto& t : prompt) t = TokenId(rng() % uint32_t(c.n_vocab));
    std::vector<float> logits(size_t(c.n_vocab));

    // Progress: one step per timed run (and per peer run).
    const int tests = (o.n_prompt > 0) + (o.n_gen > 0);
    const int peer_runs = o.peer.empty() ? 0 : 1;
    Progress bar("bench",
                 double((tests * o.reps + peer_runs) * (o.background > 0 ? 2 : 1) + int(o.streams.size()) * o.reps),
                 ProgressUnit::Count, {.quiet = o.quiet, .unit_name = "runs"});
    int runs_done = 0;
    const auto ran = [&](const std::string& what, double tps) {
      bar.update(++runs_done, fmt::format("{} {:.1f} t/s", what, tps));
    };

    const double bpt = bytes_per_step(*model);
    std::vector<double> bws, shares;  // probes around each decode run (their mean), and decode's share of it
    // One cache for all repetitions, emptied before each, as the server keeps
    // its pool and llama-bench its context: a run writes rows into memory an
    // earlier run already faulted in (a fresh cache's page faults were ~3 % of
    // a qwen3moe-mid tg128 on this VM).
    const int depth = o.n_depth;
    const KvType kv = kv_type_from_name(o.kv_type);
    const auto pp_cache = o.n_prompt > 0 ? model->new_cache(depth + o.n_prompt + 1, kv) : nullptr;
    const auto tg_cache = o.n_gen > 0 ? model->new_cache(depth + o.n_gen + 1, kv) : nullptr;
    // -d: the depth's tokens are computed once into each cache (not timed);
    // every repetition then cuts the cache back to them, as llama-bench does.
    if (depth > 0) {
      std::vector<TokenId> ctx(static_cast<size_t>(depth));
      for (auto& t : ctx) t = TokenId(rng() % uint32_t(c.n_vocab));
      for (KvCache* cache : {pp_cache.get(), tg_cache.get()})
        if (cache)
          for (int at = 0; at < depth; at += 2048)  // llama-bench's batch: bounded activations
            model->forward(std::span(ctx).subspan(size_t(at), size_t(std::min(2048, depth - at))), *cache,
                           logits.data(), false);
    }
    const double kv_bytes =  // read by a tg step at its mean depth
        tg_cache ? double(tg_cache->layout().bytes_per_token()) * (depth + o.n_gen / 2.0) : 0;
    const auto measure = [&](std::vector<double>& pp, std::vector<double>& tg, bool probe) {
      for (int rep = 0; rep < o.reps; ++rep) {
        if (o.n_prompt > 0) {
          KvCache* cache = pp_cache.get();
          cache->truncate(depth);
          const auto t0 = Clock::now();
          model->forward(prompt, *cache, logits.data(), false);
          pp.push_back(o.n_prompt / std::chrono::duration<double>(Clock::now() - t0).count());
          ran(fmt::format("pp{}", o.n_prompt), pp.back());
        }
        if (o.n_gen > 0) {  // like llama-bench's tg: n_gen single-token steps from an empty context
          KvCache* cache = tg_cache.get();
          cache->truncate(depth);
          TokenId t = prompt.empty() ? 1 : prompt[0];
          const double bw_before = probe ? probe_bandwidth(threads) : 0;
          const auto t0 = Clock::now();
          for (int i = 0; i < o.n_gen; ++i) {
            model->forward({&t, 1}, *cache, logits.data(), false);
            t = TokenId(std::max_element(logits.begin(), logits.end()) - logits.begin());
          }
          tg.push_back(o.n_gen / std::chrono::duration<double>(Clock::now() - t0).count());
          ran(fmt::format("tg{}", o.n_gen), tg.back());
          if (probe) {
            bws.push_back((bw_before + probe_bandwidth(threads)) / 2);
            shares.push_back(tg.back() * (bpt + kv_bytes) / (bws.back() * 1e9));
          }
        }
      }
    };
    // On a device the roofline is its memory's: measured once, not around each run.
    const bool on_cpu = model->backend() == ComputeBackend::Cpu;
    std::vector<double> pp, tg;
    measure(pp, tg, on_cpu);
    // Batched decode: N sequences, each from its own first token in an empty
    // context, advanced by one forward pass per step (what the scheduler does
    // with N live requests). Aggregate tokens/s, the median of the repetitions.
    const int stream_gen = o.n_gen > 0 ? o.n_gen : 64;
    std::vector<std::pair<int, double>> stream_tps;
    for (const int n : o.streams) {
      std::vector<double> runs;
      std::vector<float> rows(size_t(n) * size_t(c.n_vocab));
      std::vector<std::unique_ptr<KvCache>> caches;
      for (int s = 0; s < n; ++s) caches.push_back(model->new_cache(stream_gen + 1, kv));
      for (int rep = 0; rep < o.reps; ++rep) {
        std::vector<TokenId> next(static_cast<size_t>(n));
        for (int s = 0; s < n; ++s) {
          caches[size_t(s)]->truncate(0);
          next[size_t(s)] = prompt.empty() ? TokenId(1 + s) : prompt[size_t(s) % prompt.size()];
        }
        const auto t0 = Clock::now();
        for (int i = 0; i < stream_gen; ++i) {
          Batch b;
          for (int s = 0; s < n; ++s) {
            if (!caches[size_t(s)]->seq().reserve(1)) throw std::runtime_error("--streams: KV reservation failed");
            b.add(caches[size_t(s)]->seq(), {&next[size_t(s)], 1});
          }
          model->forward(b, rows.data());
          for (int s = 0; s < n; ++s) {
            const float* r = rows.data() + size_t(s) * size_t(c.n_vocab);
            next[size_t(s)] = TokenId(std::max_element(r, r + c.n_vocab) - r);
          }
        }
        runs.push_back(double(n) * stream_gen / std::chrono::duration<double>(Clock::now() - t0).count());
        ran(fmt::format("{} streams", n), runs.back());
      }
      stream_tps.emplace_back(n, median(runs));
    }
    // Routing over all the runs above: how evenly experts are used (entropy of the
    // token distribution, 1 = uniform) and how evenly threads were loaded.
    double entropy_sum = 0, imbalance_max = 0, imbalance_sum = 0;
    int moe_layers = 0;
    for (const auto& st : model->moe_stats()) {
      if (st.calls == 0 || st.expert_tokens.empty()) continue;
      entropy_sum += st.entropy();
      const double imb = st.thread_imbalance();
      imbalance_sum += imb;
      imbalance_max = std::max(imbalance_max, imb);
      ++moe_layers;
    }
    PeerResult peer;
    if (!o.peer.empty()) {
      peer = run_peer(o, threads, c);
      ran("llama-bench", peer.tg > 0 ? peer.tg : peer.pp);
    }
    std::vector<double> pp_load, tg_load;
    PeerResult peer_load;
    if (o.background > 0) {
      const BackgroundLoad load(o.background);
      measure(pp_load, tg_load, false);
      if (!o.peer.empty()) {
        peer_load = run_peer(o, threads, c);
        ran("llama-bench (loaded)", peer_load.tg > 0 ? peer_load.tg : peer_load.pp);
      }
    }

    bar.finish();
    const uint64_t rss = peak_rss_bytes();
    std::string bw_what = "memory bandwidth";
    if (model->backend() == ComputeBackend::Cuda) {
      std::string err;
      bws.assign(1, kernels::cuda::device_memory_gbs(o.gpu, size_t(1) << 30, &err));
      if (bws[0] <= 0) throw std::runtime_error("measuring the GPU's memory bandwidth: " + err);
      bw_what = "GPU memory bandwidth (device copy)";
      for (double t : tg) shares.push_back(t * (bpt + kv_bytes) / (bws[0] * 1e9));
    }
    if (bws.empty()) bws.push_back(probe_bandwidth(threads));
    const double bw = median(bws);
    const double roof = bw * 1e9 / (bpt + kv_bytes);
    fmt::print(
        "model: {} ({}), {:.1f} M parameters in {:.1f} MiB, threads {}, kernels {}, KV cache {}\n", o.model, c.arch,
        [&] {
          double n = 0;
          for (const auto& t : model->file().tensors()) n += double(t.n_elements);
          return n / 1e6;
        }(),
        double(model->file().file_size()) / (1 << 20), threads, cpu_kernel_isa(), o.kv_type);
    if (!on_cpu) fmt::print("forward pass on {}\n", model->device_description());
    if (!on_cpu && c.n_expert > 0 && model->device_experts_per_layer() < c.n_expert) {
      const ExpertMetrics em = model->expert_metrics();
      fmt::print(
          "experts on the device: {:.1f}% of expert uses (the rest computed on the CPU), {} moved in ({:.1f} MiB)\n",
          100.0 * em.cache_hit_rate(), em.cache_swaps, double(em.device_bytes_moved) / (1 << 20));
    }
    if (o.n_prompt > 0 || o.n_gen > 0)
      fmt::print("{:<16} {:>14} {:>16} {:>8}\n", "test", "moelsp t/s", "llama.cpp t/s", "ratio");
    const auto row = [&](const std::string& name, double ours, double theirs) {
      fmt::print("{:<16} {:>14.2f} {:>16} {:>8}\n", name, ours, theirs > 0 ? fmt::format("{:.2f}", theirs) : "-",
                 theirs > 0 ? fmt::format("{:.2f}x", ours / theirs) : "-");
    };
    const std::string at = depth > 0 ? fmt::format(" @ d{}", depth) : "";
    if (o.n_prompt > 0) row(fmt::format("pp{}{}", o.n_prompt, at), median(pp), peer.pp);
    if (o.n_gen > 0) row(fmt::format("tg{}{}", o.n_gen, at), median(tg), peer.tg);
    if (!peer.error.empty()) fmt::print("peer: {}\n", peer.error);
    if (!stream_tps.empty()) {
      // The ratio's base: the 1-stream row when measured, else tg (the same loop without a batch).
      double one = o.n_gen > 0 ? median(tg) : 0;
      for (const auto& [n, tps] : stream_tps)
        if (n == 1) one = tps;
      // The bound if steps were memory-bound: n tokens for the bytes of one n-stream step.
      fmt::print(
          "batched decode ({} tokens per stream; bandwidth bound = n x bytes of one stream's step / bytes of an "
          "n-stream step, uniform routing):\n",
          stream_gen);
      for (const auto& [n, tps] : stream_tps)
        fmt::print("  {:2} stream{} {:9.2f} t/s aggregate{}, bandwidth bound {:.2f}x\n", n, n == 1 ? " " : "s", tps,
                   one > 0 ? fmt::format(", {:.2f}x one stream", tps / one) : "",
                   n * bytes_per_step(*model) / bytes_per_step(*model, n));
    }
    if (o.background > 0) {
      fmt::print("with {} busy background process{} (each keeps a core busy):\n", o.background,
                 o.background == 1 ? "" : "es");
      if (o.n_prompt > 0) row(fmt::format("pp{}", o.n_prompt), median(pp_load), peer_load.pp);
      if (o.n_gen > 0) row(fmt::format("tg{}", o.n_gen), median(tg_load), peer_load.tg);
      const auto kept = [](double loaded, double idle) {
        return idle > 0 && loaded > 0 ? fmt::format("{:.0f}%", 100.0 * loaded / idle) : std::string("-");
      };
      fmt::print("speed kept under load: moelsp pp {} tg {}", kept(median(pp_load), median(pp)),
                 kept(median(tg_load), median(tg)));
      if (!o.peer.empty())
        fmt::print("; llama.cpp pp {} tg {}", kept(peer_load.pp, peer.pp), kept(peer_load.tg, peer.tg));
      fmt::print("\n");
      if (!peer_load.error.empty()) fmt::print("peer under load: {}\n", peer_load.error);
    }
    fmt::print(
        "peak RSS {:.1f} MiB; {} {:.1f} GB/s (median of {} measurement{}); decode reads {:.2f} "
        "MiB/token{} -> roofline {:.0f} tokens/s{}\n",
        double(rss) / (1 << 20), bw_what, bw, bws.size(), bws.size() == 1 ? "" : "s", bpt / (1 << 20),
        kv_bytes > 0 ? fmt::format(" of weights + {:.2f} MiB of KV at the mean depth (weights alone: roofline {:.0f} "
                                   "tokens/s)",
                                   kv_bytes / (1 << 20), bw * 1e9 / bpt)
                     : std::string(),
        roof,
        shares.empty()
            ? std::string()
            : fmt::format("; moelsp decode at {:.1f}% of it (median over {} run{}{}, each against the "
                          "probes around it)",
                          100.0 * median(shares), shares.size(), shares.size() == 1 ? "" : "s",
                          // The spread: on a VM one run's share can be far from the median.
                          shares.size() < 2 ? std::string()
                                            : fmt::format("; range {:.1f}-{:.1f}%",
                                                          100.0 * *std::min_element(shares.begin(), shares.end()),
                                                          100.0 * *std::max_element(shares.begin(), shares.end()))));
    if (moe_layers > 0)
      fmt::print(
          "MoE ({} layers): expert activation entropy {:.3f} (1 = uniform); thread load imbalance "
          "(max-min)/max mean {:.3f}, worst layer {:.3f}\n",
          moe_layers, entropy_sum / moe_layers, imbalance_sum / moe_layers, imbalance_max);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp bench: %s\n", e.what());
    return 1;
  }
}

void add_bench(CLI::App& app, std::vector<Command>& out) {
  auto bo = std::make_shared<BenchOptions>();
  auto* c = app.add_subcommand(
      "bench", "Prompt-processing and decode tokens/s, memory, bandwidth roofline; optionally vs llama-bench");
  c->add_option("-m,--model", bo->model, kModelHelp);
  c->add_option("-t,--threads", bo->threads, kThreadsHelp);
  c->add_option("-p,--n-prompt", bo->n_prompt, "Prompt tokens (0: skip; with -n, within the model's context)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 22));
  c->add_option("-n,--n-gen", bo->n_gen, "Generated tokens (0: skip)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 22));
  c->add_option("-d,--n-depth", bo->n_depth,
                "Context depth: pp and tg measured after this many tokens are already in the KV cache "
                "(llama-bench's -d); the roofline then counts the KV bytes each decode step reads")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 22));
  c->add_option("--kv-type", bo->kv_type,
                "KV cache type: f16, bf16, f32 or q8_0 (the peer gets the same as -ctk/-ctv); q8_0 halves the KV "
                "bytes a decode step at depth reads")
      ->capture_default_str()
      ->check(CLI::IsMember({"f16", "bf16", "f32", "q8_0"}));
  c->add_option("-r,--repetitions", bo->reps, "Repetitions (the median is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  c->add_option("--peer", bo->peer, "Path to llama.cpp's llama-bench: run it with the same settings and print ratios")
      ->check(kExecutable);
  c->add_option("--background-load", bo->background,
                "Then measure again (and the peer) while this many other processes each keep a core busy")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  c->add_option("--streams", bo->streams,
                "Also decode this many sequences together (e.g. 1,2,4,8): aggregate tokens/s per count, and the "
                "ratio to one stream")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  c->add_option("--backend", bo->backend,
                "Where the forward pass runs: cpu, cuda, or emulated (the GPU's forward pass on a host emulation: "
                "slow, for checking it without a GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "emulated"}));
  c->add_option("--gpu", bo->gpu, "CUDA device index (--backend cuda)")
      ->capture_default_str()
      ->check(CLI::Range(0, 255));
  c->add_option("--gpu-experts", bo->gpu_experts,
                "Routed experts per layer resident on the device, the rest computed on the CPU (default: all)")
      ->check(CLI::Range(0, 1 << 20));
  c->add_flag("-q,--quiet", bo->quiet, kQuietHelp);
  out.push_back({c, [bo, c] { return default_model(bo->model, c) ? bench(*bo) : 2; }});
}

}  // namespace moelsp::cli
