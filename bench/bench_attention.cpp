// Attention alone at a context depth: a decode step (one query token) and a
// prefill batch (query tokens after the depth), over a paged cache of random
// rows in the cache's types, as layers::attention sees it in a forward pass.
//
//   moelsp_bench_attention [--depth 8192] [--tokens 512] [--heads 16] [--kv-heads 4] [--hd 128]
//                          [--types F16,Q8_0] [--layers 20] [--shuffled] [--threads 2] [--reps 9]
//
// The default shape is qwen3moe-mid's (16 query heads, 4 kv heads of 128,
// 20 layers). A decode step visits every layer's cache in turn, so at depth
// they come from memory as in a forward pass: one layer alone at depth 8192
// (16 MiB of F16 rows) fits this machine's 32 MiB L3 and streamed at 46
// GB/s, where 20 layers from memory streamed at 18-20. Prints microseconds
// per layer (the fastest of --reps), the KV bytes a decode step reads per
// second (GB/s: decode attention is a stream over the cache) beside a plain
// read of the same bytes by the same threads
// and, for the prefill batch, GFLOP/s of the score and P·V multiply-adds a
// causal batch needs (2 · 2 · heads · hd flops per visible key and query).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <sys/mman.h>

#include <CLI/CLI.hpp>

#include "../engine/layers/layers.h"
#include "kernels/convert.h"
#include "kernels/quantize.h"

using namespace moelsp;

namespace {

struct Shape {
  int heads = 16, kv_heads = 4, hd = 128;
};

// n_pos rows of [K of every kv head | V of every kv head] in `type`, blocks
// of 16 rows in order (a sequence on a fresh pool) or shuffled (a pool that
// has been in use: each 32 KiB block then starts a new stream).
struct Cache {
  kernels::DType type;
  size_t row_bytes = 0;
  std::unique_ptr<uint8_t, decltype(&std::free)> data{nullptr, &std::free};
  std::vector<int32_t> blocks;
  static constexpr int kBlockSize = 16;

  size_t bytes = 0;

  Cache(kernels::DType t, const Shape& s, int n_pos, bool shuffled, std::mt19937& rng) : type(t) {
    const int w = s.kv_heads * s.hd;
    row_bytes = *kernels::row_bytes(t, uint64_t(2 * w));
    const int n_blocks = (n_pos + kBlockSize - 1) / kBlockSize;
    blocks.resize(size_t(n_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    if (shuffled) std::shuffle(blocks.begin(), blocks.end(), rng);
    allocate();
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> row(size_t(2 * w));
    for (size_t r = 0; r < size_t(n_blocks) * kBlockSize; ++r) {
      for (float& x : row) x = nd(rng);
      kernels::quantize_row(t, row.data(), data.get() + r * row_bytes, 2 * w);
    }
  }
  // Another layer's cache: the same rows at other addresses.
  Cache(const Cache& o) : type(o.type), row_bytes(o.row_bytes), blocks(o.blocks) {
    allocate();
    std::memcpy(data.get(), o.data.get(), bytes);
  }
  // 2 MiB pages where the kernel gives them, as the engine's KV pool asks
  // (a 4 KiB page holds two rows: the prefetchers stop at every page).
  void allocate() {
    bytes = (blocks.size() * kBlockSize * row_bytes + (size_t(2) << 20) - 1) & ~((size_t(2) << 20) - 1);
    data.reset(static_cast<uint8_t*>(std::aligned_alloc(size_t(2) << 20, bytes)));
    madvise(data.get(), bytes, MADV_HUGEPAGE);
  }
  PagedRows rows(int64_t elem_offset) const {
    PagedRows r;
    r.base = data.get();
    r.block_bytes = kBlockSize * row_bytes;
    r.row_bytes = row_bytes;
    r.blocks = blocks.data();
    r.block_size = kBlockSize;
    r.type = type;
    return r.at(elem_offset);
  }
};

// The fastest of `reps` calls of fn, in seconds: on a shared virtual machine
// other guests only ever add time (the median moved by ±40 % between runs
// here, the minimum by a few per cent).
template <class Fn>
double min_seconds(int reps, const Fn& fn) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t.front();
}

// The ceiling a decode step's attention streams against: the threads read
// the same bytes of each layer's cache in turn (a load a cache line, the
// threads on adjacent halves, as attention's key ranges are), and nothing else.
void stream_read(ThreadPool& pool, const std::vector<Cache>& layer, double bytes) {
  const int64_t lines = int64_t(bytes) / 64;
  for (const Cache& c : layer) {
    std::vector<uint64_t> sums(size_t(pool.size()) * 8);
    pool.parallel_for(pool.size(), [&](int64_t b, int64_t e) {
      for (int64_t part = b; part < e; ++part) {
        const int64_t l0 = lines * part / pool.size(), l1 = lines * (part + 1) / pool.size();
        const uint8_t* p = c.data.get();
        uint64_t x = 0;
        for (int64_t l = l0; l < l1; ++l) x ^= *reinterpret_cast<const volatile uint64_t*>(p + l * 64);
        sums[size_t(part) * 8] = x;
      }
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Attention at a context depth: decode step and prefill batch, per KV cache type"};
  Shape s;
  int depth = 8192, tokens = 512, threads = 2, reps = 9, n_layers = 20;
  bool shuffled = false;
  std::vector<std::string> types = {"F16", "Q8_0"};
  app.add_option("--depth", depth, "Positions already in the cache")->check(CLI::Range(1, 1 << 20));
  app.add_option("--tokens", tokens, "Query tokens of the prefill batch (0: decode only)")->check(CLI::Range(0, 8192));
  app.add_option("--heads", s.heads, "Query heads");
  app.add_option("--kv-heads", s.kv_heads, "KV heads");
  app.add_option("--hd", s.hd, "Head size (K and V)");
  app.add_option("--types", types, "KV cache types, comma-separated (F16, BF16, Q8_0, F32)")->delimiter(',');
  app.add_option("--layers", n_layers,
                 "Layers, each with a cache of its own, that a decode step visits in turn (a deep context then comes "
                 "from memory, as in a forward pass, not from the L3 cache)")
      ->check(CLI::Range(1, 256));
  app.add_flag("--shuffled", shuffled, "Cache blocks in shuffled order (a pool in use), not in order");
  app.add_option("--threads", threads, "Threads")->check(CLI::Range(1, 256));
  app.add_option("--reps", reps, "Repetitions (the fastest is reported)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  ThreadPool pool(threads);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int w = s.kv_heads * s.hd;
  const int n_q = std::max(tokens, 1);
  std::vector<float> q(size_t(n_q) * size_t(s.heads) * size_t(s.hd)), out(q.size());
  for (float& x : q) x = nd(rng);
  std::printf("shape: %d heads, %d kv heads, hd %d; depth %d; %d threads\n", s.heads, s.kv_heads, s.hd, depth, threads);
  for (const std::string& name : types) {
    const auto t = kernels::dtype_from_name(name);
    if (!t) {
      std::fprintf(stderr, "unknown type %s\n", name.c_str());
      return 2;
    }
    std::vector<Cache> layer;
    layer.reserve(size_t(n_layers));
    layer.emplace_back(*t, s, depth + tokens + 1, shuffled, rng);
    while (int(layer.size()) < n_layers) layer.emplace_back(layer.front());
    const Cache& c = layer.front();
    const auto args = [&](int n_tokens, int pos0, const Cache& cache) {
      return layers::AttentionArgs{.q = q.data(),
                                   .ldq = int64_t(s.heads) * s.hd,
                                   .k = cache.rows(0),
                                   .v = cache.rows(w),
                                   .n_tokens = n_tokens,
                                   .pos0 = pos0,
                                   .n_head = s.heads,
                                   .n_head_kv = s.kv_heads,
                                   .hd_k = s.hd,
                                   .hd_v = s.hd,
                                   .scale = 1.0f / std::sqrt(float(s.hd)),
                                   .out = out.data(),
                                   .ldo = int64_t(s.heads) * s.hd};
    };
    std::vector<layers::AttentionArgs> decode;
    for (const Cache& l : layer) decode.push_back(args(1, depth, l));
    const double td = min_seconds(reps,
                                  [&] {
                                    for (const layers::AttentionArgs& a : decode) layers::attention(pool, a);
                                  }) /
                      n_layers;
    const double kv_bytes = double(c.row_bytes) * (depth + 1);
    const double ts = min_seconds(reps, [&] { stream_read(pool, layer, kv_bytes); }) / n_layers;
    std::printf("%-5s decode  %9.1f us a layer  %6.2f GB/s of KV (a plain read of the same rows: %.2f GB/s, %.0f %%)\n",
                name.c_str(), td * 1e6, kv_bytes / td * 1e-9, kv_bytes / ts * 1e-9, 100.0 * ts / td);
    if (tokens > 0) {
      const auto prefill = args(tokens, depth, c);
      const double tp = min_seconds(std::max(1, reps / 2), [&] { layers::attention(pool, prefill); });
      const double keys = double(tokens) * depth + double(tokens) * (tokens + 1) / 2;  // visible (query, key) pairs
      const double flops = keys * 4.0 * s.heads * s.hd;
      std::printf("%-5s prefill %9.1f us  %6.1f GFLOP/s (%d tokens)\n", name.c_str(), tp * 1e6, flops / tp * 1e-9,
                  tokens);
    }
  }
  return 0;
}
