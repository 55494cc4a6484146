// DeepSeek Sparse Attention's decode cost against the context length:
//
//   moelsp_bench_dsa -m SPARSE.gguf [--dense DENSE.gguf] [--contexts 1024,2048,...,32768]
//                    [--steps 9] [-t THREADS] [--kv-type f16]
//
// For each context length n, the KV cache is filled with n rows of random
// values (a prefill of 32k tokens at GLM-5's shapes would take hours on a
// laptop, and a decode step's cost does not depend on what the rows hold;
// only the indexer's choice does, and it keeps top_k of them either way),
// then `steps` single-token decode steps are timed (median ms/token). With
// --dense, the same for a second model: the same weights as a deepseek2 file
// without the indexer (moelsp_make_synthetic_model --shape glm-dsa --dense),
// i.e. dense MLA over every key. Sparse cost should stay nearly flat past
// top_k keys (the indexer still scans every key, with far fewer
// multiply-adds per key than attention), dense cost grows linearly.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "engine/kv.h"
#include "engine/kv_type.h"
#include "engine/model.h"
#include "kernels/quantize.h"

using Clock = std::chrono::steady_clock;
using namespace moelsp;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// ms per decoded token after `n_ctx` cached positions of random rows.
double decode_ms(Model& m, KvType kv, int n_ctx, int steps) {
  const KvLayout layout = m.kv_layout(kv);
  KvCache cache(layout, n_ctx + steps + 1);
  KvSequence& seq = cache.seq();
  if (!seq.reserve(n_ctx)) throw std::runtime_error("KV cache too small");
  std::mt19937 rng{static_cast<uint32_t>(n_ctx)};
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int row = layout.k_dim + layout.v_dim;
  std::vector<float> v(static_cast<size_t>(row));
  for (int il = 0; il < layout.n_layer; ++il)
    for (int pos = 0; pos < n_ctx; ++pos) {
      for (float& x : v) x = nd(rng);
      kernels::quantize_row(to_dtype(kv), v.data(), seq.row(il, pos), row);
    }
  std::vector<TokenId> toks(static_cast<size_t>(n_ctx));
  for (auto& t : toks) t = TokenId(rng() % uint32_t(m.config().n_vocab));
  seq.commit(toks);
  std::vector<float> logits(static_cast<size_t>(m.config().n_vocab));
  std::vector<double> ms;
  TokenId t = 100;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = Clock::now();
    m.forward({&t, 1}, cache, logits.data(), false);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    t = TokenId(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  return median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Decode time per token against the context length: sparse (DSA) vs dense attention"};
  std::string sparse_path, dense_path, contexts = "1024,2048,4096,8192,16384,32768", kv_name = "f16";
  int steps = 9, threads = 0;
  app.add_option("-m,--model", sparse_path, "The glm-dsa model")->required();
  app.add_option("--dense", dense_path, "The same model as deepseek2 (dense attention), to compare");
  app.add_option("--contexts", contexts, "Comma-separated context lengths");
  app.add_option("--steps", steps, "Decode steps timed per context (median)");
  app.add_option("-t,--threads", threads, "Threads (default: physical cores)");
  app.add_option("--kv-type", kv_name, "KV row type: f32, f16, bf16, q8_0");
  CLI11_PARSE(app, argc, argv);
  try {
    const KvType kv = kv_type_from_name(kv_name);
    std::vector<int> ctxs;
    std::stringstream ss(contexts);
    for (std::string c; std::getline(ss, c, ',');) ctxs.push_back(std::stoi(c));
    auto sparse = Model::load(sparse_path, {.threads = threads});
    std::unique_ptr<Model> dense;
    if (!dense_path.empty()) dense = Model::load(dense_path, {.threads = threads});
    // The growth over the first context is the attention's (and the
    // indexer's) share: the weights cost the same at every length.
    std::printf("%-8s %14s %14s %12s %12s %8s\n", "context", "sparse ms/tok", "dense ms/tok", "sparse +ms", "dense +ms",
                "dense/sparse");
    double s0 = -1, d0 = -1;
    for (int n : ctxs) {
      const double s = decode_ms(*sparse, kv, n, steps);
      const double d = dense ? decode_ms(*dense, kv, n, steps) : 0;
      if (s0 < 0) s0 = s, d0 = d;
      if (dense) std::printf("%-8d %14.1f %14.1f %12.1f %12.1f %7.2fx\n", n, s, d, s - s0, d - d0, d / s);
      else std::printf("%-8d %14.1f %14s %12.1f %12s\n", n, s, "-", s - s0, "-");
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp_bench_dsa: %s\n", e.what());
    return 1;
  }
}
