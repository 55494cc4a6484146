// The paged KV cache and the scheduler, measured through the engine API:
//
//   moelsp_bench_kv -m MODEL.gguf [--prompt-tokens 2000] [--edits 50] [--streams 4] [--gen 64] [--rounds 3]
//                   [-t THREADS] [--kv-type f16] [--skip-editor] [--skip-streams] [--layout]
//
// (a) The editor pattern: a prompt of code, then `edits` requests, each the
//     previous text with one more character typed near its end (inside the
//     last line, so a suffix follows as in a FIM prompt). Median time to first
//     token with the prefix cache and without it (the same engine, cache off).
// (b) `streams` generation requests submitted together vs the same requests
//     one after another: total generated tokens/s of each, and the ratio
//     (alternating rounds, median ratio).
// (c) KV bytes per token of the model in each row type, against the layout
//     a GQA model of the same attention shape would cache.
// (d) --layout: decode tokens/s after a `prompt-tokens` prompt with the KV
//     rows in 16-token blocks vs one contiguous block per sequence
//     (alternating rounds): the measurement behind the plan's paging choice.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/engine.h"
#include "engine/kv.h"
#include "engine/model.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace moelsp;

namespace {

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Distinct C++ from this repository, enough for `tokens` tokens.
std::string code_text(const Tokenizer& tok, int tokens) {
  std::vector<fs::path> files;
  for (const char* dir : {"/engine", "/kernels", "/lsp", "/server"})
    for (const auto& e : fs::recursive_directory_iterator(std::string(MOELSP_SOURCE_DIR) + dir))
      if (e.is_regular_file() && (e.path().extension() == ".cpp" || e.path().extension() == ".h"))
        files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    text += ss.str();
    if (int(tok.encode(text).size()) > tokens) break;
  }
  // Cut to `tokens` tokens at a line end.
  const auto ids = tok.encode(text);
  std::string cut =
      tok.decode(std::vector<TokenId>(ids.begin(), ids.begin() + std::min<size_t>(ids.size(), size_t(tokens))));
  return cut.substr(0, cut.rfind('\n') + 1);
}

Request one_token(std::vector<TokenId> prompt) {
  Request r;
  r.prompt_tokens = std::move(prompt);
  r.sampling = SamplingParams::greedy();
  r.max_tokens = 1;
  r.ignore_eos = true;
  r.priority = Priority::kCompletion;
  return r;
}

void editor_pattern(const std::shared_ptr<Model>& m, const EngineOptions& base, int prompt_tokens, int edits) {
  const Tokenizer& tok = m->tokenizer();
  std::string text = code_text(tok, prompt_tokens);
  // The cursor: inside the last line, 12 characters before its end.
  const size_t cursor0 = text.size() - 13;
  const std::string typed = "value_of_the_edit_so_far(typed, one, key, at, a, time);";
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i <= edits; ++i) {
    std::string t = text;
    t.insert(cursor0, typed.substr(0, size_t(i) % typed.size()));
    prompts.push_back(tok.encode(t));
  }
  fmt::print("(a) editor pattern: {}-token prompt of code, then {} requests each one character longer near the end\n",
             prompts[0].size(), edits);
  double med[2] = {0, 0};
  for (bool reuse : {false, true}) {
    EngineOptions o = base;
    o.prefix_cache = reuse;
    Engine e(m, o);
    e.submit(one_token(prompts[0])).wait();  // the file as first opened
    std::vector<double> ttft;
    int cached = 0;
    for (int i = 1; i <= edits; ++i) {
      const auto t0 = Clock::now();
      const Result r = e.submit(one_token(prompts[size_t(i)])).wait();
      ttft.push_back(ms_since(t0));
      cached += r.timings.n_prompt_cached;
      if (r.reason == FinishReason::Error) throw std::runtime_error(r.error);
    }
    med[reuse] = median(ttft);
    const EngineMetrics mt = e.metrics();
    fmt::print(
        "    prefix cache {:3}: median TTFT {:8.1f} ms (min {:.1f}, max {:.1f}); {:.0f} prompt tokens cached per "
        "request; "
        "hit rate {:.3f}\n",
        reuse ? "on" : "off", med[reuse], *std::min_element(ttft.begin(), ttft.end()),
        *std::max_element(ttft.begin(), ttft.end()), double(cached) / edits, mt.prefix_hit_rate);
  }
  fmt::print("    speed-up with reuse: {:.1f}x\n", med[0] / med[1]);
}

void streams(const std::shared_ptr<Model>& m, const EngineOptions& base, int n_streams, int gen, int rounds) {
  const Tokenizer& tok = m->tokenizer();
  const std::string text = code_text(tok, 64 * n_streams + 64);
  const auto ids = tok.encode(text);
  std::vector<Request> reqs;
  for (int i = 0; i < n_streams; ++i) {
    Request r;
    r.prompt_tokens.assign(ids.begin() + 64 * i, ids.begin() + 64 * (i + 1));  // distinct 64-token prompts
    r.sampling = SamplingParams::greedy();
    r.max_tokens = gen;
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  fmt::print("(b) {} generation streams of {} tokens (64-token prompts), submitted together vs one after another\n",
             n_streams, gen);
  EngineOptions o = base;
  o.prefix_cache = false;
  Engine e(m, o);
  e.submit(reqs[0]).wait();  // warm-up (page in the weights)
  // Alternating rounds: this machine's speed drifts by minutes, so each
  // ratio compares neighbours and the median ratio is reported.
  std::vector<double> ratios;
  for (int round = 0; round < rounds; ++round) {
    double tps[2];
    for (bool together : {false, true}) {
      const auto t0 = Clock::now();
      const EngineMetrics before = e.metrics();
      int tokens = 0;
      if (together) {
        std::vector<Handle> hs;
        for (const auto& r : reqs) hs.push_back(e.submit(r));
        for (auto& h : hs) tokens += int(h.wait().tokens.size());
      } else {
        for (const auto& r : reqs) tokens += int(e.submit(r).wait().tokens.size());
      }
      const double s = ms_since(t0) / 1000;
      tps[together] = tokens / s;
      const EngineMetrics after = e.metrics();
      const double mean_batch =
          double(after.step_seqs - before.step_seqs) / double(std::max<int64_t>(1, after.steps - before.steps));
      fmt::print("    round {} {:10}: {:5d} tokens in {:6.2f} s = {:7.1f} tokens/s (mean batch {:.2f})\n", round + 1,
                 together ? "together" : "sequential", tokens, s, tps[together], mean_batch);
    }
    ratios.push_back(tps[1] / tps[0]);
  }
  fmt::print("    ratio together / sequential: median {:.2f}x (rounds:", median(ratios));
  for (double r : ratios) fmt::print(" {:.2f}", r);
  fmt::print(")\n");
}

void kv_bytes(const Model& m) {
  const ModelConfig& c = m.config();
  fmt::print("(c) KV bytes per token ({} layers)\n", c.n_layer);
  for (KvType t : {KvType::F16, KvType::F32, KvType::Q8_0}) {
    try {
      fmt::print("    this model, {:5}: {:8} bytes\n", to_string(t), m.kv_layout(t).bytes_per_token());
    } catch (const std::exception& e) {
      fmt::print("    this model, {:5}: n/a ({})\n", to_string(t), e.what());
    }
  }
  if (c.kv_lora_rank > 0) {
    // What the same attention would cache without MLA, in F16: every head's
    // key (qk_nope + qk_rope) and value, or with GQA groups of 4 / 8 query heads.
    const int64_t per_head = int64_t(c.head_dim_k + c.head_dim_v) * 2 * c.n_layer;
    const int64_t mla = int64_t(c.kv_lora_rank + c.qk_rope) * 2 * c.n_layer;
    fmt::print("    MLA latent + rope key (f16): {} values/layer = {} bytes\n", c.kv_lora_rank + c.qk_rope, mla);
    for (int group : {1, 4, 8}) {
      if (group > c.n_head || c.n_head % group) continue;
      const int kv_heads = c.n_head / group;
      fmt::print("    {}, {:2} kv heads of k {} + v {}, f16: {:8} bytes = {:.1f}x MLA\n",
                 group == 1 ? "MHA (the expanded form)" : fmt::format("GQA, {} query heads per kv head", group),
                 kv_heads, c.head_dim_k, c.head_dim_v, per_head * kv_heads, double(per_head * kv_heads) / double(mla));
    }
  }
}

void layout(Model& m, KvType type, int prompt_tokens, int gen, int rounds) {
  const int n_ctx = prompt_tokens + gen + 1;
  std::vector<TokenId> toks;
  for (int i = 0; i < prompt_tokens + gen; ++i) toks.push_back(TokenId(100 + (i * 7919) % (m.config().n_vocab - 200)));
  std::vector<float> logits(static_cast<size_t>(m.config().n_vocab));
  const auto decode_tps = [&](int block_size) {
    KvCache cache(m.kv_layout(type, block_size), n_ctx);
    for (int at = 0; at < prompt_tokens; at += 256)
      m.forward(std::span(toks).subspan(size_t(at), size_t(std::min(256, prompt_tokens - at))), cache, logits.data(),
                false);
    const auto t0 = Clock::now();
    for (int i = 0; i < gen; ++i)
      m.forward(std::span(&toks[size_t(prompt_tokens + i)], 1), cache, logits.data(), false);
    return gen / std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // Q8_0 rows need blocks of a multiple of 32 tokens.
  const int whole = type == KvType::Q8_0 ? (n_ctx + 31) / 32 * 32 : n_ctx;
  std::vector<int> sizes;
  for (int b : {16, 64})
    if (type != KvType::Q8_0 || b % 32 == 0) sizes.push_back(b);
  sizes.push_back(whole);
  std::vector<std::vector<double>> tps(sizes.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < sizes.size(); ++i) tps[i].push_back(decode_tps(sizes[i]));
  const auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double contiguous = med(tps.back());
  fmt::print("(d) decode after {} prompt tokens, {} tokens each, median of {} alternating rounds:\n", prompt_tokens,
             gen, rounds);
  for (size_t i = 0; i < sizes.size(); ++i)
    fmt::print("    {:>22}: {:7.2f} tokens/s  ({:.3f} of contiguous)\n",
               i + 1 == sizes.size() ? "contiguous (1 block)" : fmt::format("blocks of {}", sizes[i]), med(tps[i]),
               med(tps[i]) / contiguous);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Paged KV cache benchmarks: editor-pattern TTFT with/without prefix reuse, concurrent streams, KV bytes"};
  std::string model, kv_type = "f16";
  int threads = 0, prompt_tokens = 2000, edits = 50, n_streams = 4, gen = 64, rounds = 3;
  bool skip_editor = false, skip_streams = false, do_layout = false;
  app.add_option("-m,--model", model, "GGUF model file")->required();
  app.add_option("-t,--threads", threads, "Threads (default: physical cores)");
  app.add_option("--prompt-tokens", prompt_tokens, "(a) prompt size")->capture_default_str();
  app.add_option("--edits", edits, "(a) requests after the first")->capture_default_str();
  app.add_option("--streams", n_streams, "(b) concurrent streams")->capture_default_str();
  app.add_option("--gen", gen, "(b) tokens per stream")->capture_default_str();
  app.add_option("--rounds", rounds, "(b) alternating sequential / together rounds")->capture_default_str();
  app.add_option("--kv-type", kv_type, "KV rows: f16, bf16, f32, q8_0")->capture_default_str();
  app.add_flag("--skip-editor", skip_editor, "Skip (a)");
  app.add_flag("--skip-streams", skip_streams, "Skip (b)");
  app.add_flag("--layout", do_layout, "(d) paged vs contiguous decode (uses --prompt-tokens, --gen, --rounds)");
  CLI11_PARSE(app, argc, argv);
  try {
    auto m = std::shared_ptr<Model>(Model::load(model, {.threads = threads}));
    EngineOptions o;
    o.kv_type = kv_type_from_name(kv_type);
    o.n_ctx = std::max(4096, prompt_tokens + 256);
    fmt::print("{} ({}), {} threads, KV {}\n", model, m->config().arch, m->threads(), kv_type);
    if (!skip_editor) editor_pattern(m, o, prompt_tokens, edits);
    if (!skip_streams) streams(m, o, n_streams, gen, rounds);
    kv_bytes(*m);
    if (do_layout) layout(*m, o.kv_type, prompt_tokens, gen, rounds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp_bench_kv: %s\n", e.what());
    return 1;
  }
  return 0;
}
