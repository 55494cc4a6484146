// layers::attention against a naive double-precision attention, over paged
// F16 and F32 cache rows whose blocks are scattered: every way a sequence's
// work is cut into jobs (token blocks, split query heads, key ranges, decode's
// jobs over several kv heads' rows) for several shapes, thread counts,
// sliding windows and sinks. A batch of sequences gives each the bits it gets
// alone, and F16 and Q8_0 rows (read in place) give the bits BF16 rows of the same
// values give (widened into a buffer).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include <catch2/catch.hpp>

#include "../engine/layers/layers.h"
#include "kernels/convert.h"
#include "kernels/isa.h"
#include "kernels/types.h"

using namespace moelsp;

namespace {

struct Shape {
  int n_head, n_head_kv, hd;
  int window = 0;
  bool sinks = false;
};

// A sequence's cache: n_pos rows of [K of every kv head | V of every kv head]
// in `type`, in blocks of block_size rows placed in shuffled order.
struct Cache {
  kernels::DType type;
  int block_size;
  size_t row_bytes;
  std::vector<uint8_t> data;
  std::vector<int32_t> blocks;
  std::vector<float> k, v;  // [pos][n_head_kv·hd], the values as stored (rounded to the type)

  // grid: values k/64 with |k| ≤ 127, exact in F16, BF16 and Q8_0 (blocks
  // of scale 1/64) alike; Q8_0 needs the grid and a head size of 32s.
  Cache(kernels::DType t, const Shape& s, int n_pos, int bs, std::mt19937& rng, bool grid = false)
      : type(t), block_size(bs) {
    const int w = s.n_head_kv * s.hd;
    const size_t el = t == kernels::DType::F32 ? 4 : 2;
    row_bytes = t == kernels::DType::Q8_0 ? size_t(2 * w) / 32 * 34 : size_t(2 * w) * el;
    const int n_blocks = (n_pos + bs - 1) / bs;
    blocks.resize(size_t(n_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    data.assign(size_t(n_blocks) * size_t(bs) * row_bytes, 0);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    k.resize(size_t(n_pos) * size_t(w));
    v.resize(k.size());
    for (int p = 0; p < n_pos; ++p) {
      uint8_t* row = data.data() + size_t(blocks[size_t(p / bs)]) * size_t(bs) * row_bytes + size_t(p % bs) * row_bytes;
      for (int i = 0; i < 2 * w; ++i) {
        float x = nd(rng);
        if (grid) x = std::clamp(std::round(x * 64.0f), -127.0f, 127.0f) / 64.0f;
        if (t == kernels::DType::Q8_0) {
          uint8_t* blk = row + size_t(i / 32) * 34;
          const uint16_t d = kernels::fp32_to_fp16(1.0f / 64.0f);
          std::memcpy(blk, &d, 2);
          blk[2 + i % 32] = uint8_t(int8_t(std::lround(x * 64.0f)));
        } else if (t == kernels::DType::F16) {
          const uint16_t h = kernels::fp32_to_fp16(x);
          x = kernels::fp16_to_fp32(h);
          std::memcpy(row + size_t(i) * 2, &h, 2);
        } else if (t == kernels::DType::BF16) {
          const uint16_t h = kernels::fp32_to_bf16(x);
          x = kernels::bf16_to_fp32(h);
          std::memcpy(row + size_t(i) * 2, &h, 2);
        } else {
          std::memcpy(row + size_t(i) * 4, &x, 4);
        }
        (i < w ? k[size_t(p) * size_t(w) + size_t(i)] : v[size_t(p) * size_t(w) + size_t(i - w)]) = x;
      }
    }
  }
  PagedRows rows(int64_t elem_offset) const {
    PagedRows r;
    r.base = data.data();
    r.block_bytes = size_t(block_size) * row_bytes;
    r.row_bytes = row_bytes;
    r.blocks = blocks.data();
    r.block_size = block_size;
    r.type = type;
    return r.at(elem_offset);
  }
};

// out [n_tokens][n_head·hd]: query t (position pos0 + t) over the keys it sees.
std::vector<double> naive(const Shape& s, const Cache& c, const std::vector<float>& q, const std::vector<float>& sinks,
                          int n_tokens, int pos0, float scale) {
  const int w = s.n_head_kv * s.hd, group = s.n_head / s.n_head_kv;
  std::vector<double> out(size_t(n_tokens) * size_t(s.n_head) * size_t(s.hd), 0.0);
  for (int t = 0; t < n_tokens; ++t)
    for (int h = 0; h < s.n_head; ++h) {
      const int g = h / group, pos = pos0 + t;
      const int first = s.window > 0 ? std::max(0, pos + 1 - s.window) : 0;
      std::vector<double> sc;
      for (int j = first; j <= pos; ++j) {
        double d = 0;
        for (int i = 0; i < s.hd; ++i)
          d += double(q[(size_t(t) * size_t(s.n_head) + size_t(h)) * size_t(s.hd) + size_t(i)]) *
               double(c.k[size_t(j) * size_t(w) + size_t(g * s.hd + i)]);
        sc.push_back(d * scale);
      }
      double mx = *std::max_element(sc.begin(), sc.end());
      if (!sinks.empty()) mx = std::max(mx, double(sinks[size_t(h)]));
      double sum = sinks.empty() ? 0.0 : std::exp(double(sinks[size_t(h)]) - mx);
      for (double& x : sc) sum += x = std::exp(x - mx);
      double* o = out.data() + (size_t(t) * size_t(s.n_head) + size_t(h)) * size_t(s.hd);
      for (int j = first; j <= pos; ++j)
        for (int i = 0; i < s.hd; ++i)
          o[i] += sc[size_t(j - first)] / sum * double(c.v[size_t(j) * size_t(w) + size_t(g * s.hd + i)]);
    }
  return out;
}

struct Case {
  std::vector<float> q, sinks, out;
  layers::AttentionArgs args(const Shape& s, const Cache& c, int n_tokens, int pos0) {
    const int w = s.n_head_kv * s.hd;
    return {.q = q.data(),
            .ldq = int64_t(s.n_head) * s.hd,
            .k = c.rows(0),
            .v = c.rows(w),
            .n_tokens = n_tokens,
            .pos0 = pos0,
            .n_head = s.n_head,
            .n_head_kv = s.n_head_kv,
            .hd_k = s.hd,
            .hd_v = s.hd,
            .scale = 1.0f / std::sqrt(float(s.hd)),
            .window = s.window,
            .sinks = sinks.empty() ? nullptr : sinks.data(),
            .out = out.data(),
            .ldo = int64_t(s.n_head) * s.hd};
  }
  Case(const Shape& s, int n_tokens, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    q.resize(size_t(n_tokens) * size_t(s.n_head) * size_t(s.hd));
    for (float& x : q) x = nd(rng);
    if (s.sinks) {
      sinks.resize(size_t(s.n_head));
      for (float& x : sinks) x = nd(rng);
    }
    out.assign(q.size(), NAN);
  }
};

}  // namespace

// BF16 rows at Isa::Avx512Bf16 are read with vdpbf16ps, which rounds q and
// the probabilities to bf16 as they meet the rows (kernels/cpu/attention_bf16.cpp):
// each score then carries up to 2^-9 · Σ|q·k| · scale of error (~0.01 for
// these O(1) values at hd 128), and the outputs a few thousandths.
TEST_CASE("attention matches a naive attention over paged F16, F32 and BF16 rows, every job layout") {
  std::mt19937 rng(7);
  const Shape shapes[] = {{16, 4, 128},           {8, 8, 64},         {12, 2, 64}, {8, 2, 64, 40, true},
                          {8, 2, 64, 130, false}, {4, 4, 32, 0, true}};
  double worst_bf16 = 0;
  for (const kernels::DType type : {kernels::DType::F16, kernels::DType::F32, kernels::DType::BF16})
    for (const Shape& s : shapes)
      for (const int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        // (tokens, position of the first): decode steps at short and long contexts, a few tokens, a prompt.
        for (const auto& [n_tokens, pos0] :
             {std::pair{1, 0}, {1, 5}, {1, 63}, {1, 64}, {1, 130}, {1, 301}, {1, 1000}, {3, 90}, {40, 0}, {20, 77}}) {
          const Cache c(type, s, pos0 + n_tokens, 16, rng);
          Case cs(s, n_tokens, rng);
          layers::attention(pool, cs.args(s, c, n_tokens, pos0));
          const auto want = naive(s, c, cs.q, cs.sinks, n_tokens, pos0, 1.0f / std::sqrt(float(s.hd)));
          double worst = 0;
          for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(double(cs.out[i]) - want[i]));
          INFO(kernels::dtype_name(type) << " heads " << s.n_head << "/" << s.n_head_kv << " hd " << s.hd << " window "
                                         << s.window << " sinks " << s.sinks << " threads " << threads << " tokens "
                                         << n_tokens << " at " << pos0 << ": max |Δ| " << worst);
          if (type == kernels::DType::BF16 && kernels::isa_level() >= kernels::Isa::Avx512Bf16) {
            worst_bf16 = std::max(worst_bf16, worst);
            CHECK(worst < 1.5e-2);  // q and p rounded to bf16
          } else {
            CHECK(worst < 2e-5);  // f32 sums of O(1) values against double
          }
        }
      }
  WARN("BF16 rows with vdpbf16ps: max |Δ| " << worst_bf16);
}

TEST_CASE("a batch of sequences' attention gives each the bits it gets alone") {
  std::mt19937 rng(11);
  const Shape s{16, 4, 128};
  ThreadPool pool(2);
  const std::pair<int, int> seqs[] = {{1, 300}, {1, 20}, {1, 1000}, {4, 50}};
  std::vector<Cache> caches;
  std::vector<Case> alone, batched;
  std::vector<layers::AttentionArgs> batch;
  for (const auto& [n, pos0] : seqs) {
    caches.emplace_back(kernels::DType::F16, s, pos0 + n, 16, rng);
    alone.emplace_back(s, n, rng);
    batched.push_back(alone.back());
  }
  for (size_t i = 0; i < caches.size(); ++i) {
    layers::attention(pool, alone[i].args(s, caches[i], seqs[i].first, seqs[i].second));
    batch.push_back(batched[i].args(s, caches[i], seqs[i].first, seqs[i].second));
  }
  layers::attention(pool, batch);
  for (size_t i = 0; i < caches.size(); ++i)
    CHECK(std::memcmp(alone[i].out.data(), batched[i].out.data(), alone[i].out.size() * 4) == 0);
}

// `type`'s rows read in place against BF16 rows holding the same values
// (exact in both) widened into a buffer: the same sums in the same order, so
// the same bits, at every ISA level; decode over several kv heads' rows, one
// kv head (MLA's latent rows), prompts.
namespace {
void check_in_place_bits(kernels::DType type, std::initializer_list<Shape> shapes, uint32_t seed) {
  for (const kernels::Isa level : {kernels::Isa::Avx2, kernels::Isa::Avx512Vnni}) {
    if (level > kernels::detected_isa()) continue;
    kernels::set_isa(level);
    std::mt19937 rng(seed);
    for (const Shape& s : shapes)
      for (const int threads : {1, 2})
        for (const auto& [n_tokens, pos0] :
             {std::pair{1, 0}, {1, 15}, {1, 37}, {1, 300}, {1, 1000}, {3, 90}, {40, 7}}) {
          ThreadPool pool(threads);
          std::mt19937 values(uint32_t(pos0 + 1));
          const Cache h(type, s, pos0 + n_tokens, 16, values, true);
          values.seed(uint32_t(pos0 + 1));
          const Cache b(kernels::DType::BF16, s, pos0 + n_tokens, 16, values, true);
          REQUIRE(h.k == b.k);
          REQUIRE(h.v == b.v);
          Case x(s, n_tokens, rng);
          Case y = x;
          layers::attention(pool, x.args(s, h, n_tokens, pos0));
          layers::attention(pool, y.args(s, b, n_tokens, pos0));
          INFO(kernels::isa_name(level) << " heads " << s.n_head << "/" << s.n_head_kv << " hd " << s.hd << " threads "
                                        << threads << " tokens " << n_tokens << " at " << pos0);
          CHECK(std::memcmp(x.out.data(), y.out.data(), x.out.size() * 4) == 0);
        }
  }
  kernels::set_isa(kernels::detected_isa());
}
}  // namespace

TEST_CASE("F16 cache rows read in place give the bits of the same values widened from BF16") {
  check_in_place_bits(kernels::DType::F16,
                      {Shape{16, 4, 128}, Shape{8, 2, 64, 40, true}, Shape{12, 3, 72}, Shape{6, 3, 36},
                       Shape{16, 1, 64}, Shape{4, 1, 36, 0, true}},
                      23);
}

// Q8_0 rows are read where they lie too (at AVX-512), each value widened to
// d·q, exact in f32. Head sizes of whole 32-value blocks only.
TEST_CASE("Q8_0 cache rows read in place give the bits of the same values widened from BF16") {
  check_in_place_bits(kernels::DType::Q8_0,
                      {Shape{16, 4, 128}, Shape{8, 2, 64, 40, true}, Shape{16, 1, 64}, Shape{6, 2, 32}}, 37);
}
