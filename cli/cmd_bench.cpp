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
#include <optional>
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

namespace {

std::unique_ptr<Model> load_for_bench(const BenchOptions& o) {
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
  return model;
}

// Expert routing over all the runs: how evenly experts are used (entropy of
// the token distribution, 1 = uniform) and how evenly threads were loaded.
struct Routing {
  double entropy_sum = 0, imbalance_max = 0, imbalance_sum = 0;
  int layers = 0;

  explicit Routing(const Model& m) {
    for (const auto& st : m.moe_stats()) {
      if (st.calls == 0 || st.expert_tokens.empty()) continue;
      entropy_sum += st.entropy();
      const double imb = st.thread_imbalance();
      imbalance_sum += imb;
      imbalance_max = std::max(imbalance_max, imb);
      ++layers;
    }
  }
};

// One `moelsp bench`: the phases in the order they run (measure, streams,
// peer, under load), then the report.
class BenchRun {
 public:
  explicit BenchRun(const BenchOptions& o)
      : o_(o),
        model_(load_for_bench(o)),
        c_(model_->config()),
        threads_(model_->threads()),
        on_cpu_(model_->backend() == ComputeBackend::Cpu),
        bar_("bench", planned_runs(o), ProgressUnit::Count, {.quiet = o.quiet, .unit_name = "runs"}),
        logits_(size_t(c_.n_vocab)),
        bpt_(bytes_per_step(*model_)) {
    std::mt19937 rng(1);
    prompt_.resize(size_t(o.n_prompt));
    for (auto& t : prompt_) t = TokenId(rng() % uint32_t(c_.n_vocab));
    make_caches(rng);
  }

  void run() {
    measure(pp_, tg_, on_cpu_);
    streams();
    routing_.emplace(*model_);  // the runs above, not those under load
    if (!o_.peer.empty()) {
      peer_ = run_peer(o_, threads_, c_);
      ran("llama-bench", peer_.tg > 0 ? peer_.tg : peer_.pp);
    }
    if (o_.background > 0) {
      const BackgroundLoad load(o_.background);
      measure(pp_load_, tg_load_, false);
      if (!o_.peer.empty()) {
        peer_load_ = run_peer(o_, threads_, c_);
        ran("llama-bench (loaded)", peer_load_.tg > 0 ? peer_load_.tg : peer_load_.pp);
      }
    }
    bar_.finish();
    rss_ = peak_rss_bytes();  // before a fallback bandwidth probe's buffer could count
    report();
  }

 private:
  // Progress: one step per timed run (and per peer run).
  static double planned_runs(const BenchOptions& o) {
    const int tests = (o.n_prompt > 0) + (o.n_gen > 0), peer_runs = o.peer.empty() ? 0 : 1;
    return double((tests * o.reps + peer_runs) * (o.background > 0 ? 2 : 1) + int(o.streams.size()) * o.reps);
  }
  void ran(const std::string& what, double tps) { bar_.update(++runs_done_, fmt::format("{} {:.1f} t/s", what, tps)); }

  // One cache for all repetitions, emptied before each, as the server keeps
  // its pool and llama-bench its context: a run writes rows into memory an
  // earlier run already faulted in (a fresh cache's page faults were ~3 % of
  // a qwen3moe-mid tg128 on this VM). -d: the depth's tokens are computed
  // once into each cache (not timed); every repetition then cuts the cache
  // back to them, as llama-bench does.
  void make_caches(std::mt19937& rng) {
    const int depth = o_.n_depth;
    kv_ = kv_type_from_name(o_.kv_type);
    if (o_.n_prompt > 0) pp_cache_ = model_->new_cache(depth + o_.n_prompt + 1, kv_);
    if (o_.n_gen > 0) tg_cache_ = model_->new_cache(depth + o_.n_gen + 1, kv_);
    if (depth > 0) {
      std::vector<TokenId> ctx(static_cast<size_t>(depth));
      for (auto& t : ctx) t = TokenId(rng() % uint32_t(c_.n_vocab));
      for (KvCache* cache : {pp_cache_.get(), tg_cache_.get()})
        if (cache)
          for (int at = 0; at < depth; at += 2048)  // llama-bench's batch: bounded activations
            model_->forward(std::span(ctx).subspan(size_t(at), size_t(std::min(2048, depth - at))), *cache,
                            logits_.data(), false);
    }
    // read by a tg step at its mean depth
    kv_bytes_ = tg_cache_ ? double(tg_cache_->layout().bytes_per_token()) * (depth + o_.n_gen / 2.0) : 0;
  }

  void measure(std::vector<double>& pp, std::vector<double>& tg, bool probe) {
    for (int rep = 0; rep < o_.reps; ++rep) {
      if (o_.n_prompt > 0) {
        pp_cache_->truncate(o_.n_depth);
        const auto t0 = Clock::now();
        model_->forward(prompt_, *pp_cache_, logits_.data(), false);
        pp.push_back(o_.n_prompt / std::chrono::duration<double>(Clock::now() - t0).count());
        ran(fmt::format("pp{}", o_.n_prompt), pp.back());
      }
      if (o_.n_gen > 0) tg.push_back(decode_run(probe));
    }
  }

  // Like llama-bench's tg: n_gen single-token steps after the depth. With
  // `probe`, the bandwidth is measured before and after, and the run's share
  // of the roofline is taken against their mean (a VM's bandwidth drifts).
  double decode_run(bool probe) {
    tg_cache_->truncate(o_.n_depth);
    TokenId t = prompt_.empty() ? 1 : prompt_[0];
    const double bw_before = probe ? probe_bandwidth(threads_) : 0;
    const auto t0 = Clock::now();
    for (int i = 0; i < o_.n_gen; ++i) {
      model_->forward({&t, 1}, *tg_cache_, logits_.data(), false);
      t = TokenId(std::max_element(logits_.begin(), logits_.end()) - logits_.begin());
    }
    const double tps = o_.n_gen / std::chrono::duration<double>(Clock::now() - t0).count();
    ran(fmt::format("tg{}", o_.n_gen), tps);
    if (probe) {
      bws_.push_back((bw_before + probe_bandwidth(threads_)) / 2);
      shares_.push_back(tps * (bpt_ + kv_bytes_) / (bws_.back() * 1e9));
    }
    return tps;
  }

  // Batched decode: N sequences, each from its own first token in an empty
  // context, advanced by one forward pass per step (what the scheduler does
  // with N live requests). Aggregate tokens/s, the median of the repetitions.
  void streams() {
    for (const int n : o_.streams) {
      std::vector<double> runs;
      std::vector<float> rows(size_t(n) * size_t(c_.n_vocab));
      std::vector<std::unique_ptr<KvCache>> caches;
      for (int s = 0; s < n; ++s) caches.push_back(model_->new_cache(stream_gen() + 1, kv_));
      for (int rep = 0; rep < o_.reps; ++rep) {
        std::vector<TokenId> next(static_cast<size_t>(n));
        for (int s = 0; s < n; ++s) {
          caches[size_t(s)]->truncate(0);
          next[size_t(s)] = prompt_.empty() ? TokenId(1 + s) : prompt_[size_t(s) % prompt_.size()];
        }
        const auto t0 = Clock::now();
        for (int i = 0; i < stream_gen(); ++i) {
          Batch b;
          for (int s = 0; s < n; ++s) {
            if (!caches[size_t(s)]->seq().reserve(1)) throw std::runtime_error("--streams: KV reservation failed");
            b.add(caches[size_t(s)]->seq(), {&next[size_t(s)], 1});
          }
          model_->forward(b, rows.data());
          for (int s = 0; s < n; ++s) {
            const float* r = rows.data() + size_t(s) * size_t(c_.n_vocab);
            next[size_t(s)] = TokenId(std::max_element(r, r + c_.n_vocab) - r);
          }
        }
        runs.push_back(double(n) * stream_gen() / std::chrono::duration<double>(Clock::now() - t0).count());
        ran(fmt::format("{} streams", n), runs.back());
      }
      stream_tps_.emplace_back(n, median(runs));
    }
  }
  int stream_gen() const { return o_.n_gen > 0 ? o_.n_gen : 64; }

  void report();
  void report_header() const;
  void report_rows() const;
  void report_streams() const;
  void report_load() const;
  void report_roofline(const std::string& bw_what) const;
  void row(const std::string& name, double ours, double theirs) const {
    fmt::print("{:<16} {:>14.2f} {:>16} {:>8}\n", name, ours, theirs > 0 ? fmt::format("{:.2f}", theirs) : "-",
               theirs > 0 ? fmt::format("{:.2f}x", ours / theirs) : "-");
  }

  const BenchOptions& o_;
  std::unique_ptr<Model> model_;
  const ModelConfig& c_;
  const int threads_;
  const bool on_cpu_;  // on a device the roofline is its memory's: measured once, not around each run
  Progress bar_;
  int runs_done_ = 0;
  std::vector<TokenId> prompt_;
  std::vector<float> logits_;
  const double bpt_;  // bytes a decode step reads (weights)
  KvType kv_ = KvType::F16;
  std::unique_ptr<KvCache> pp_cache_, tg_cache_;
  double kv_bytes_ = 0;               // KV bytes a decode step reads at its mean depth
  std::vector<double> bws_, shares_;  // probes around each decode run (their mean), and decode's share of it
  std::vector<double> pp_, tg_, pp_load_, tg_load_;
  std::vector<std::pair<int, double>> stream_tps_;
  PeerResult peer_, peer_load_;
  std::optional<Routing> routing_;
  uint64_t rss_ = 0;
};

void BenchRun::report() {
  std::string bw_what = "memory bandwidth";
  if (model_->backend() == ComputeBackend::Cuda) {
    std::string err;
    bws_.assign(1, kernels::cuda::device_memory_gbs(o_.gpu, size_t(1) << 30, &err));
    if (bws_[0] <= 0) throw std::runtime_error("measuring the GPU's memory bandwidth: " + err);
    bw_what = "GPU memory bandwidth (device copy)";
    for (double t : tg_) shares_.push_back(t * (bpt_ + kv_bytes_) / (bws_[0] * 1e9));
  }
  if (bws_.empty()) bws_.push_back(probe_bandwidth(threads_));
  report_header();
  report_rows();
  report_streams();
  report_load();
  report_roofline(bw_what);
  const Routing& routing = *routing_;
  if (routing.layers > 0)
    fmt::print(
        "MoE ({} layers): expert activation entropy {:.3f} (1 = uniform); thread load imbalance "
        "(max-min)/max mean {:.3f}, worst layer {:.3f}\n",
        routing.layers, routing.entropy_sum / routing.layers, routing.imbalance_sum / routing.layers,
        routing.imbalance_max);
}

void BenchRun::report_header() const {
  double params = 0;
  for (const auto& t : model_->file().tensors()) params += double(t.n_elements);
  fmt::print("model: {} ({}), {:.1f} M parameters in {:.1f} MiB, threads {}, kernels {}, KV cache {}\n", o_.model,
             c_.arch, params / 1e6, double(model_->file().file_size()) / (1 << 20), threads_, cpu_kernel_isa(),
             o_.kv_type);
  if (!on_cpu_) fmt::print("forward pass on {}\n", model_->device_description());
  if (!on_cpu_ && c_.n_expert > 0 && model_->device_experts_per_layer() < c_.n_expert) {
    const ExpertMetrics em = model_->expert_metrics();
    fmt::print(
        "experts on the device: {:.1f}% of expert uses (the rest computed on the CPU), {} moved in ({:.1f} MiB)\n",
        100.0 * em.cache_hit_rate(), em.cache_swaps, double(em.device_bytes_moved) / (1 << 20));
  }
}

void BenchRun::report_rows() const {
  if (o_.n_prompt > 0 || o_.n_gen > 0)
    fmt::print("{:<16} {:>14} {:>16} {:>8}\n", "test", "moelsp t/s", "llama.cpp t/s", "ratio");
  const std::string at = o_.n_depth > 0 ? fmt::format(" @ d{}", o_.n_depth) : "";
  if (o_.n_prompt > 0) row(fmt::format("pp{}{}", o_.n_prompt, at), median(pp_), peer_.pp);
  if (o_.n_gen > 0) row(fmt::format("tg{}{}", o_.n_gen, at), median(tg_), peer_.tg);
  if (!peer_.error.empty()) fmt::print("peer: {}\n", peer_.error);
}

void BenchRun::report_streams() const {
  if (stream_tps_.empty()) return;
  // The ratio's base: the 1-stream row when measured, else tg (the same loop without a batch).
  double one = o_.n_gen > 0 ? median(tg_) : 0;
  for (const auto& [n, tps] : stream_tps_)
    if (n == 1) one = tps;
  // The bound if steps were memory-bound: n tokens for the bytes of one n-stream step.
  fmt::print(
      "batched decode ({} tokens per stream; bandwidth bound = n x bytes of one stream's step / bytes of an "
      "n-stream step, uniform routing):\n",
      stream_gen());
  for (const auto& [n, tps] : stream_tps_)
    fmt::print("  {:2} stream{} {:9.2f} t/s aggregate{}, bandwidth bound {:.2f}x\n", n, n == 1 ? " " : "s", tps,
               one > 0 ? fmt::format(", {:.2f}x one stream", tps / one) : "",
               n * bytes_per_step(*model_) / bytes_per_step(*model_, n));
}

void BenchRun::report_load() const {
  if (o_.background <= 0) return;
  fmt::print("with {} busy background process{} (each keeps a core busy):\n", o_.background,
             o_.background == 1 ? "" : "es");
  if (o_.n_prompt > 0) row(fmt::format("pp{}", o_.n_prompt), median(pp_load_), peer_load_.pp);
  if (o_.n_gen > 0) row(fmt::format("tg{}", o_.n_gen), median(tg_load_), peer_load_.tg);
  const auto kept = [](double loaded, double idle) {
    return idle > 0 && loaded > 0 ? fmt::format("{:.0f}%", 100.0 * loaded / idle) : std::string("-");
  };
  fmt::print("speed kept under load: moelsp pp {} tg {}", kept(median(pp_load_), median(pp_)),
             kept(median(tg_load_), median(tg_)));
  if (!o_.peer.empty())
    fmt::print("; llama.cpp pp {} tg {}", kept(peer_load_.pp, peer_.pp), kept(peer_load_.tg, peer_.tg));
  fmt::print("\n");
  if (!peer_load_.error.empty()) fmt::print("peer under load: {}\n", peer_load_.error);
}

void BenchRun::report_roofline(const std::string& bw_what) const {
  const double bw = median(bws_);
  const double roof = bw * 1e9 / (bpt_ + kv_bytes_);
  const std::string kv = kv_bytes_ > 0
                             ? fmt::format(
                                   " of weights + {:.2f} MiB of KV at the mean depth (weights alone: roofline {:.0f} "
                                   "tokens/s)",
                                   kv_bytes_ / (1 << 20), bw * 1e9 / bpt_)
                             : std::string();
  // The spread: on a VM one run's share can be far from the median.
  const std::string range = shares_.size() < 2 ? std::string()
                                               : fmt::format("; range {:.1f}-{:.1f}%",
                                                             100.0 * *std::min_element(shares_.begin(), shares_.end()),
                                                             100.0 * *std::max_element(shares_.begin(), shares_.end()));
  const std::string share = shares_.empty()
                                ? std::string()
                                : fmt::format(
                                      "; moelsp decode at {:.1f}% of it (median over {} run{}{}, each against the "
                                      "probes around it)",
                                      100.0 * median(shares_), shares_.size(), shares_.size() == 1 ? "" : "s", range);
  fmt::print(
      "peak RSS {:.1f} MiB; {} {:.1f} GB/s (median of {} measurement{}); decode reads {:.2f} "
      "MiB/token{} -> roofline {:.0f} tokens/s{}\n",
      double(rss_) / (1 << 20), bw_what, bw, bws_.size(), bws_.size() == 1 ? "" : "s", bpt_ / (1 << 20), kv, roof,
      share);
}

}  // namespace

int bench(const BenchOptions& o) {
  try {
    BenchRun(o).run();
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
