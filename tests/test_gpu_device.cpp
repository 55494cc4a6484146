// kernels/gpu.h's Device, one operation at a time: the host emulation against
// independent references (kernels::ref's matmul, plain formulas) in every
// build, then the CUDA device against the emulation on the same inputs where
// a GPU is present (skipped with a WARN otherwise).
//
// Tolerances: matmul within 1e-4 of Σ|w·x| per output (f32 sums in another
// order; the CUDA prompt path rounds W and x to F16: 2e-3 there); element-wise
// steps within 1e-5 relative; attention within 1e-4 (online vs two-pass
// softmax); the router's choice exactly.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cuda.h"
#include "kernels/gpu.h"
#include "kernels/matmul.h"
#include "kernels/quantize.h"

using namespace moelsp::kernels;

namespace {

std::vector<float> randn(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// Host vectors in and out of a device.
struct On {
  gpu::Device& d;
  std::vector<gpu::Buffer> keep;
  template <class T>
  T* put(const std::vector<T>& v) {
    keep.emplace_back(d, v.size() * sizeof(T));
    d.upload(keep.back().as(), v.data(), v.size() * sizeof(T));
    return keep.back().as<T>();
  }
  template <class T>
  T* room(size_t n) {
    keep.emplace_back(d, n * sizeof(T));
    return keep.back().as<T>();
  }
  template <class T>
  std::vector<T> get(const T* p, size_t n) {
    std::vector<T> v(n);
    d.download(v.data(), p, n * sizeof(T));
    return v;
  }
};

// W (rows × cols of type t; F16/F32 rows padded to groups of 32) · x for m inputs.
std::vector<float> device_matmul(gpu::Device& d, DType t, const std::vector<uint8_t>& w, size_t row_bytes, int64_t rows,
                                 int64_t cols, const std::vector<float>& x, int64_t m) {
  On on{d, {}};
  const gpu::Mat mat{.data = on.put(w), .type = t, .rows = rows, .cols = cols, .row_bytes = row_bytes};
  float* y = on.room<float>(size_t(rows * m));
  d.matmul(mat, on.put(x), cols, m, y, rows);
  return on.get(y, size_t(rows * m));
}

struct Case {
  DType t;
  int64_t cols;
};

std::vector<std::unique_ptr<gpu::Device>> devices_to_check() {
  std::vector<std::unique_ptr<gpu::Device>> v;
  std::string err;
  if (auto c = gpu::make_cuda_device(0, &err)) v.push_back(std::move(c));
  else WARN("CUDA device: " << err << ": the CUDA side of these comparisons skipped");
  return v;
}

}  // namespace

TEST_CASE("device matmul (every decoded type, padded rows, decode and prompt widths) matches the reference") {
  auto emu = gpu::make_emulated_device();
  auto gpus = devices_to_check();
  const Case cases[] = {{DType::F32, 256},  {DType::F16, 512},  {DType::BF16, 256}, {DType::Q8_0, 512},
                        {DType::Q4_0, 256}, {DType::Q5_0, 256}, {DType::Q4_K, 512}, {DType::Q5_K, 256},
                        {DType::Q6_K, 512}, {DType::F16, 48},   {DType::F32, 24}};
  const int64_t rows = 37;
  for (const Case& cs : cases)
    for (int64_t m : {1, 3, 8, 17}) {
      INFO(dtype_name(cs.t) << " cols " << cs.cols << " inputs " << m);
      const int64_t padded = (cs.cols + 31) / 32 * 32;
      const bool pad = padded != cs.cols;
      const auto wf = randn(size_t(rows * cs.cols), 3, 0.5f);
      const size_t rb = pad ? size_t(padded) * (cs.t == DType::F32 ? 4 : 2) : *row_bytes(cs.t, uint64_t(cs.cols));
      std::vector<uint8_t> w(size_t(rows) * rb, 0);
      std::vector<float> deq(wf.size());  // what W holds after quantization
      for (int64_t r = 0; r < rows; ++r) {
        quantize_row(cs.t, wf.data() + r * cs.cols, w.data() + size_t(r) * rb, cs.cols);
        ref::dequantize_row(cs.t, w.data() + size_t(r) * rb, deq.data() + r * cs.cols, cs.cols);
      }
      const auto x = randn(size_t(m * cs.cols), 5);
      std::vector<float> want(size_t(rows * m)), bound(want.size());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < rows; ++r) {
          double s = 0, a = 0;
          for (int64_t c = 0; c < cs.cols; ++c) {
            s += double(deq[size_t(r * cs.cols + c)]) * x[size_t(i * cs.cols + c)];
            a += std::fabs(double(deq[size_t(r * cs.cols + c)]) * x[size_t(i * cs.cols + c)]);
          }
          want[size_t(i * rows + r)] = float(s);
          bound[size_t(i * rows + r)] = float(a);
        }
      const auto check = [&](gpu::Device& d, double tol) {
        INFO(d.name());
        const auto got = device_matmul(d, cs.t, w, rb, rows, cs.cols, x, m);
        int bad = 0;
        for (size_t k = 0; k < got.size(); ++k) bad += std::fabs(got[k] - want[k]) > tol * (1.0 + bound[k]);
        CHECK(bad == 0);
      };
      check(*emu, 1e-5);
      for (auto& g : gpus) check(*g, m > 8 ? 2e-3 : 1e-4);
    }
}

TEST_CASE("device element-wise steps, router, gather/scatter and paged attention: CUDA matches the emulation") {
  auto emu = gpu::make_emulated_device();
  auto gpus = devices_to_check();
  // The emulation's attention against a plain two-pass softmax over contiguous rows.
  const int n_tok = 3, pos0 = 21, n_head = 4, n_kv_head = 2, hd = 48, hdv = 40, bs = 4;
  const int n_pos = pos0 + n_tok, n_blocks = (n_pos + bs - 1) / bs;
  const int kdim = n_kv_head * hd, vdim = n_kv_head * hdv;
  const auto q = randn(size_t(n_tok * n_head * hd), 11);
  const auto kv = randn(size_t(n_pos * (kdim + vdim)), 12);  // [pos][K | V] in f32
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int b = 0; b < n_blocks; ++b) table[size_t(b)] = n_blocks - 1 - b;  // blocks in reverse: the table matters
  std::vector<float> want(size_t(n_tok * n_head * hdv));
  for (int t = 0; t < n_tok; ++t)
    for (int h = 0; h < n_head; ++h) {
      const int g = h / (n_head / n_kv_head), n = pos0 + t + 1;
      std::vector<double> s(static_cast<size_t>(n));
      double mx = -1e30, sum = 0;
      for (int j = 0; j < n; ++j) {
        double dot = 0;
        for (int e = 0; e < hd; ++e)
          dot += double(q[size_t((t * n_head + h) * hd + e)]) * kv[size_t(j * (kdim + vdim) + g * hd + e)];
        s[size_t(j)] = dot * 0.125;
        mx = std::max(mx, s[size_t(j)]);
      }
      for (double& v : s) sum += v = std::exp(v - mx);
      for (int e = 0; e < hdv; ++e) {
        double o = 0;
        for (int j = 0; j < n; ++j) o += s[size_t(j)] * kv[size_t(j * (kdim + vdim) + kdim + g * hdv + e)];
        want[size_t((t * n_head + h) * hdv + e)] = float(o / sum);
      }
    }
  // Everything each device computes from the same inputs.
  struct Out {
    std::vector<float> attn, attn16, norm, roped, glu, biased, gathered, scattered, copied, experts, combined;
    std::vector<int> chosen;
    std::vector<float> weight;
    std::vector<int64_t> counts;
  };
  const auto run = [&](gpu::Device& d) {
    On on{d, {}};
    Out o;
    // The cache: F32 rows written by kv_store through the block table, then attention.
    for (DType kt : {DType::F32, DType::F16}) {
      const size_t el = kt == DType::F32 ? 4 : 2, rb = size_t(kdim + vdim) * el;
      uint8_t* base = on.room<uint8_t>(size_t(n_blocks) * rb * bs);
      const int32_t* tab = on.put(table);
      const gpu::KvRows kr{.base = base,
                           .block_bytes = rb * bs,
                           .row_bytes = rb,
                           .offset = 0,
                           .blocks = tab,
                           .block_size = bs,
                           .type = kt};
      gpu::KvRows vr = kr;
      vr.offset = size_t(kdim) * el;
      const float* src = on.put(kv);
      d.kv_store(src, kdim + vdim, kdim, n_pos, 0, kr);
      d.kv_store(src + kdim, kdim + vdim, vdim, n_pos, 0, vr);
      float* out = on.room<float>(want.size());
      d.attention({.q = on.put(q),
                   .ldq = n_head * hd,
                   .k = kr,
                   .v = vr,
                   .n_tokens = n_tok,
                   .pos0 = pos0,
                   .n_head = n_head,
                   .n_head_kv = n_kv_head,
                   .hd_k = hd,
                   .hd_v = hdv,
                   .scale = 0.125f,
                   .out = out,
                   .ldo = n_head * hdv});
      (kt == DType::F32 ? o.attn : o.attn16) = on.get(out, want.size());
    }
    // RMSNorm over strided rows, in place.
    const auto x = randn(5 * 70, 21), w = randn(64, 22);
    float* xd = on.put(x);
    d.rms_norm(xd, 70, on.put(w), 64, 1e-5f, xd, 5);
    o.norm = on.get(xd, x.size());
    // RoPE (NeoX and adjacent pairs) from tables.
    const auto cs = randn(2 * 8, 23), sn = randn(2 * 8, 24);
    float* r = on.put(x);
    d.rope(r, 2, 70, 3, 20, 2, 8, true, on.put(cs), on.put(sn));
    d.rope(r, 2, 70, 1, 0, 50, 8, false, on.put(cs), on.put(sn));
    o.roped = on.get(r, x.size());
    // SwiGLU, biases, gather/scatter, strided copy.
    const auto g = randn(300, 25), u = randn(300, 26);
    float* y = on.room<float>(300);
    d.swiglu(on.put(g), on.put(u), y, 300);
    o.glu = on.get(y, 300);
    float* b = on.put(x);
    d.add_bias(b, on.put(w), 5, 64);
    o.biased = on.get(b, 5 * 64);
    const std::vector<int32_t> idx = {4, 0, 2};
    float* gathered = on.room<float>(3 * 64);
    d.gather_rows(on.put(x), 70, on.put(idx), 3, 64, gathered);
    o.gathered = on.get(gathered, 3 * 64);
    float* acc = on.put(x);
    d.scatter_add_rows(gathered, 64, on.put(idx), on.put(std::vector<float>{0.5f, -1.0f, 2.0f}), 3, acc, 70);
    o.scattered = on.get(acc, x.size());
    float* c2 = on.put(x);
    d.copy_2d(c2 + 3, 70, on.put(g), 60, 5, 17);
    o.copied = on.get(c2, x.size());
    // The router: sigmoid + bias, 4 of 8 groups, top 6 of 64, renormalized and scaled.
    hd::RouteParams rp;
    rp.n_expert = 64, rp.k = 6, rp.gating = hd::RouteGating::Sigmoid, rp.n_group = 8, rp.n_group_used = 4;
    rp.norm = true, rp.scale = 2.5f;
    const auto logits = randn(7 * 64, 27), bias = randn(64, 28, 0.1f);
    int* ch = on.room<int>(7 * 6);
    float* wt = on.room<float>(7 * 6);
    d.route(rp, on.put(logits), 7, on.put(bias), ch, wt);
    o.chosen = on.get(ch, 7 * 6);
    o.weight = on.get(wt, 7 * 6);
    // The chosen experts' products, picked on the device: 64 Q4_K experts of
    // 40 × 256, the router's 7 × 6 choices; per-slot inputs, then the combine.
    std::vector<uint8_t> experts(64 * 40 * (*row_bytes(DType::Q4_K, 256)));
    const size_t erb = *row_bytes(DType::Q4_K, 256), stride = 40 * erb;
    const auto ew = randn(64 * 40 * 256, 29, 0.3f);
    for (int i = 0; i < 64 * 40; ++i) quantize_row(DType::Q4_K, ew.data() + i * 256, experts.data() + i * erb, 256);
    const auto xs = randn(7 * 6 * 256, 30), eb = randn(64 * 40, 31);
    float* ey = on.room<float>(7 * 6 * 40);
    d.matmul_experts(
        {.first = {.data = on.put(experts), .type = DType::Q4_K, .rows = 40, .cols = 256, .row_bytes = erb},
         .stride = stride,
         .ids = ch,
         .n_slots = 7 * 6,
         .k = 6,
         .x = on.put(xs),
         .ldx = 256,
         .x_per_slot = true,
         .bias = on.put(eb),
         .y = ey,
         .ldy = 40});
    o.experts = on.get(ey, 7 * 6 * 40);
    float* comb = on.put(std::vector<float>(7 * 40, 1.0f));
    d.moe_combine(ey, 40, wt, 7, 6, 40, comb, 40);
    o.combined = on.get(comb, 7 * 40);
    int64_t* counts = on.room<int64_t>(64);
    d.zero(counts, 64 * sizeof(int64_t));
    d.count_ids(ch, 7 * 6, counts);
    o.counts = on.get(counts, 64);
    return o;
  };
  const Out e = run(*emu);
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("attention output " << i);
    CHECK(std::fabs(e.attn[i] - want[i]) <= 1e-5 * (1 + std::fabs(want[i])));
    CHECK(std::fabs(e.attn16[i] - want[i]) <= 2e-2 * (1 + std::fabs(want[i])));  // f16 rows
  }
  CHECK(e.scattered[size_t(4 * 70 + 1)] == Approx(e.gathered[1] * 0.5f + e.gathered[1]));
  const auto g_in = randn(300, 25), x_in = randn(5 * 70, 21);
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 70; ++c)
      CHECK(e.copied[size_t(r * 70 + c)] ==
            (c >= 3 && c < 20 ? g_in[size_t(r * 60 + c - 3)] : x_in[size_t(r * 70 + c)]));
  // The experts' products and their combination against plain loops over the emulation's own choice.
  {
    const size_t erb = *row_bytes(DType::Q4_K, 256);
    std::vector<uint8_t> experts(64 * 40 * erb);
    const auto ew = randn(64 * 40 * 256, 29, 0.3f);
    for (int r = 0; r < 64 * 40; ++r) quantize_row(DType::Q4_K, ew.data() + r * 256, experts.data() + r * erb, 256);
    const auto xs = randn(7 * 6 * 256, 30), eb = randn(64 * 40, 31);
    std::vector<float> row(256);
    std::vector<int64_t> counts(64, 0);
    for (int s = 0; s < 42; ++s) {
      const int ex = e.chosen[size_t(s)];
      ++counts[size_t(ex)];
      for (int r = 0; r < 40; ++r) {
        ref::dequantize_row(DType::Q4_K, experts.data() + size_t(ex * 40 + r) * erb, row.data(), 256);
        double acc = eb[size_t(ex * 40 + r)];
        for (int c = 0; c < 256; ++c) acc += double(row[size_t(c)]) * xs[size_t(s * 256 + c)];
        INFO("slot " << s << " row " << r);
        CHECK(e.experts[size_t(s * 40 + r)] == Approx(acc).epsilon(1e-4).margin(1e-4));
      }
    }
    for (int t = 0; t < 7; ++t)
      for (int c = 0; c < 40; ++c) {
        double acc = 1.0;
        for (int j = 0; j < 6; ++j)
          acc += double(e.weight[size_t(t * 6 + j)]) * e.experts[size_t((t * 6 + j) * 40 + c)];
        CHECK(e.combined[size_t(t * 40 + c)] == Approx(acc).epsilon(1e-5).margin(1e-5));
      }
    CHECK(e.counts == counts);
  }
  const auto close = [](const std::vector<float>& a, const std::vector<float>& b, double tol) {
    REQUIRE(a.size() == b.size());
    int bad = 0;
    for (size_t i = 0; i < a.size(); ++i) bad += std::fabs(a[i] - b[i]) > tol * (1 + std::fabs(b[i]));
    return bad;
  };
  for (auto& dev : gpus) {
    INFO(dev->name());
    const Out c = run(*dev);
    CHECK(close(c.attn, e.attn, 1e-4) == 0);
    CHECK(close(c.attn16, e.attn16, 1e-4) == 0);
    CHECK(close(c.norm, e.norm, 1e-5) == 0);
    CHECK(close(c.roped, e.roped, 1e-5) == 0);
    CHECK(close(c.glu, e.glu, 1e-5) == 0);
    CHECK(close(c.biased, e.biased, 0) == 0);
    CHECK(close(c.gathered, e.gathered, 0) == 0);
    CHECK(close(c.scattered, e.scattered, 1e-6) == 0);
    CHECK(close(c.copied, e.copied, 0) == 0);
    CHECK(c.chosen == e.chosen);
    CHECK(close(c.weight, e.weight, 1e-5) == 0);
    CHECK(close(c.experts, e.experts, 1e-4) == 0);
    CHECK(close(c.combined, e.combined, 1e-4) == 0);
    CHECK(c.counts == e.counts);
  }
}

// Long contexts (the CUDA kernel splits the keys across blocks and merges
// them), a sliding window and sinks, GQA groups of 4: the emulation against a
// plain two-pass softmax, the CUDA device against the emulation (1e-4).
TEST_CASE("device attention over long contexts, windows and sinks") {
  auto emu = gpu::make_emulated_device();
  auto gpus = devices_to_check();
  struct Case {
    int n_tok, pos0, window;
    bool sinks;
  };
  const Case cases[] = {{1, 900, 0, false}, {2, 700, 0, true}, {3, 650, 100, true}, {1, 1200, 300, false}};
  const int n_head = 8, n_kv_head = 2, hd = 64, hdv = 64, bs = 16;
  for (const Case& cs : cases) {
    INFO("tokens " << cs.n_tok << " after " << cs.pos0 << ", window " << cs.window << ", sinks " << cs.sinks);
    const int n_pos = cs.pos0 + cs.n_tok, n_blocks = (n_pos + bs - 1) / bs, row = n_kv_head * (hd + hdv);
    const auto q = randn(size_t(cs.n_tok * n_head * hd), 41);
    const auto kv = randn(size_t(n_pos * row), 42);
    const auto sinks = randn(size_t(n_head), 43, 2.0f);
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    for (int b = 0; b < n_blocks; ++b) table[size_t(b)] = (b * 7) % n_blocks;  // a permutation (7 ∤ n_blocks below)
    REQUIRE(n_blocks % 7 != 0);
    std::vector<float> want(size_t(cs.n_tok * n_head * hdv));
    for (int t = 0; t < cs.n_tok; ++t)
      for (int h = 0; h < n_head; ++h) {
        const int g = h / (n_head / n_kv_head), n = cs.pos0 + t + 1,
                  j0 = cs.window > 0 ? std::max(0, n - cs.window) : 0;
        std::vector<double> sc(static_cast<size_t>(n), 0.0);
        double mx = -1e300;
        for (int j = j0; j < n; ++j) {
          double dot = 0;
          for (int e = 0; e < hd; ++e)
            dot += double(q[size_t((t * n_head + h) * hd + e)]) * kv[size_t(j * row + g * hd + e)];
          sc[size_t(j)] = dot / 8.0;
          mx = std::max(mx, sc[size_t(j)]);
        }
        double sum = cs.sinks ? std::exp(double(sinks[size_t(h)]) - mx) : 0.0;
        for (int j = j0; j < n; ++j) sum += sc[size_t(j)] = std::exp(sc[size_t(j)] - mx);
        for (int e = 0; e < hdv; ++e) {
          double o = 0;
          for (int j = j0; j < n; ++j) o += sc[size_t(j)] * kv[size_t(j * row + n_kv_head * hd + g * hdv + e)];
          want[size_t((t * n_head + h) * hdv + e)] = float(o / sum);
        }
      }
    const auto run = [&](gpu::Device& d) {
      On on{d, {}};
      const size_t rb = size_t(row) * 2;  // F16 rows
      uint8_t* base = on.room<uint8_t>(size_t(n_blocks) * rb * bs);
      const gpu::KvRows kr{.base = base,
                           .block_bytes = rb * bs,
                           .row_bytes = rb,
                           .offset = 0,
                           .blocks = on.put(table),
                           .block_size = bs,
                           .type = DType::F16};
      gpu::KvRows vr = kr;
      vr.offset = size_t(n_kv_head * hd) * 2;
      const float* src = on.put(kv);
      d.kv_store(src, row, n_kv_head * hd, n_pos, 0, kr);
      d.kv_store(src + n_kv_head * hd, row, n_kv_head * hdv, n_pos, 0, vr);
      float* out = on.room<float>(want.size());
      d.attention({.q = on.put(q),
                   .ldq = n_head * hd,
                   .k = kr,
                   .v = vr,
                   .n_tokens = cs.n_tok,
                   .pos0 = cs.pos0,
                   .n_head = n_head,
                   .n_head_kv = n_kv_head,
                   .hd_k = hd,
                   .hd_v = hdv,
                   .scale = 0.125f,
                   .out = out,
                   .ldo = n_head * hdv,
                   .window = cs.window,
                   .sinks = cs.sinks ? on.put(sinks) : nullptr});
      return on.get(out, want.size());
    };
    const auto e = run(*emu);
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
      bad += std::fabs(e[i] - want[i]) > 2e-2 * (1 + std::fabs(want[i]));  // f16 rows
    CHECK(bad == 0);
    for (auto& g : gpus) {
      INFO(g->name());
      const auto c = run(*g);
      int off = 0;
      for (size_t i = 0; i < e.size(); ++i) off += std::fabs(c[i] - e[i]) > 1e-4 * (1 + std::fabs(e[i]));
      CHECK(off == 0);
    }
  }
}
