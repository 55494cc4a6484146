#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

#include "isa_levels.h"
#include "kernels/convert.h"
#include "kernels/cuda.h"
#include "kernels/isa.h"
#include "kernels/types.h"

using namespace moelsp::kernels;

TEST_CASE("fp16 round-trips every bit pattern through fp32") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(uint16_t(h));
    if (std::isnan(f)) {
      CHECK(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
      continue;
    }
    INFO("half 0x" << std::hex << h);
    REQUIRE(fp32_to_fp16(f) == h);
  }
}

TEST_CASE("fp32 → fp16 rounds to nearest even and saturates to inf") {
  CHECK(fp16_to_fp32(fp32_to_fp16(1.0f)) == 1.0f);
  CHECK(fp16_to_fp32(fp32_to_fp16(65504.0f)) == 65504.0f);
  CHECK(std::isinf(fp16_to_fp32(fp32_to_fp16(1e6f))));
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties to even → 1.
  CHECK(fp16_to_fp32(fp32_to_fp16(1.0f + 0x1p-11f)) == 1.0f);
  CHECK(fp16_to_fp32(fp32_to_fp16(1.0f + 3 * 0x1p-11f)) == 1.0f + 2 * 0x1p-10f);
  // smallest subnormal
  CHECK(fp16_to_fp32(fp32_to_fp16(0x1p-24f)) == 0x1p-24f);
  CHECK(fp16_to_fp32(fp32_to_fp16(0x1p-26f)) == 0.0f);
}

TEST_CASE("fp32 → fp16 rows: the SIMD conversion gives the scalar function's bits at every ISA level") {
  // Every 2^-9-spaced exponent/mantissa pattern: normals, halfway cases,
  // subnormals, underflow, overflow, infinities and NaNs (odd lengths: the tail).
  std::vector<float> x;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 0x10003) x.push_back(std::bit_cast<float>(uint32_t(b)));
  x.push_back(std::bit_cast<float>(0x7fc00001u));
  x.push_back(65520.0f);  // rounds up to inf
  x.push_back(0x1p-25f);  // halfway to the smallest subnormal: rounds to 0
  std::vector<uint16_t> want(x.size()), got(x.size());
  ref::fp32_to_fp16_row(x.data(), want.data(), x.size());
  const Isa saved = isa_level();
  for (Isa level : {Isa::Generic, Isa::Avx2, Isa::Avx512Vnni}) {
    if (set_isa(level) != level) continue;
    std::fill(got.begin(), got.end(), 0);
    fp32_to_fp16_row(x.data(), got.data(), x.size());
    INFO(isa_name(level));
    CHECK(got == want);
  }
  set_isa(saved);
}

TEST_CASE("bf16 conversions") {
  CHECK(bf16_to_fp32(fp32_to_bf16(1.5f)) == 1.5f);
  CHECK(bf16_to_fp32(fp32_to_bf16(-3.0f)) == -3.0f);
  CHECK(std::isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_fp32(uint16_t(b));
    if (!std::isnan(f)) REQUIRE(fp32_to_bf16(f) == b);
  }
}

TEST_CASE("type traits match the GGUF block geometry") {
  CHECK(traits(DType::Q8_0).block_size == 32);
  CHECK(traits(DType::Q8_0).type_size == 34);
  CHECK(traits(DType::Q4_K).type_size == 144);
  CHECK(traits(DType::Q6_K).type_size == 210);
  CHECK(!dtype_traits(4).has_value());   // Q4_2, removed from the format
  CHECK(!dtype_traits(31).has_value());  // Q4_0_4_4, removed
  CHECK(!dtype_traits(1000).has_value());
  CHECK(row_bytes(DType::Q4_K, 512) == 288u);
  CHECK(!row_bytes(DType::Q4_K, 100).has_value());
  CHECK(dtype_from_name("BF16") == DType::BF16);
}

// Tolerance: bit-exact (any NaN matches any NaN). fp16 → fp32 is exact in both.
TEST_CASE("CUDA fp16 → fp32 matches the reference") {
  if (cuda::devices().empty()) {
    WARN("no CUDA device (or built without CUDA): GPU comparison skipped");
    return;
  }
  std::vector<uint16_t> x(65536);
  for (uint32_t i = 0; i < x.size(); ++i) x[i] = uint16_t(i);
  std::vector<float> ref(x.size()), gpu(x.size());
  ref::fp16_to_fp32(x.data(), ref.data(), x.size());
  std::string err;
  REQUIRE(cuda::fp16_to_fp32(x.data(), gpu.data(), x.size(), &err));
  size_t mismatches = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool same = std::isnan(ref[i]) ? std::isnan(gpu[i]) : std::memcmp(&ref[i], &gpu[i], 4) == 0;
    mismatches += !same;
  }
  CHECK(mismatches == 0);
}

// ---- matmul: optimized vs reference -------------------------------------------

#include <random>

#include "kernels/matmul.h"

namespace {

std::vector<uint8_t> make_weights(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint8_t> out(size_t(rows) * *row_bytes(t, cols));
  uint8_t* p = out.data();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = nd(rng);
      switch (t) {
        case DType::F32: std::memcpy(p, &v, 4), p += 4; break;
        case DType::F16: {
          uint16_t h = fp32_to_fp16(v);
          std::memcpy(p, &h, 2), p += 2;
          break;
        }
        case DType::BF16: {
          uint16_t h = fp32_to_bf16(v);
          std::memcpy(p, &h, 2), p += 2;
          break;
        }
        case DType::Q8_0:
          if (c % 32 == 0) {
            uint16_t d = fp32_to_fp16(0.02f + 0.01f * float(rng() % 8));
            std::memcpy(p, &d, 2), p += 2;
          }
          *p++ = uint8_t(int8_t(int(rng() % 255) - 127));
          break;
        default: FAIL("type");
      }
    }
  }
  return out;
}

// a's product computed as two calls, rows [row_begin, at) and [at, row_end).
std::vector<float> split_rows(const MatmulArgs& a, int64_t at) {
  std::vector<float> y(size_t(a.m * a.ldy));
  MatmulArgs lo = a, hi = a;
  lo.y = hi.y = y.data();
  lo.row_end = hi.row_begin = at;
  matmul(lo);
  matmul(hi);
  return y;
}

using moelsp::test::supported_isas;

}  // namespace

std::vector<uint8_t> make_random_blocks(DType t, int64_t rows, int64_t cols, std::mt19937& rng);

// Tolerance: |opt − ref| ≤ 1e-5 · Σ|w·x| + 1e-6 per output (f32 vs double accumulation).
TEST_CASE("matmul matches the reference for every supported weight type") {
  std::mt19937 rng(3);
  set_activations(Activations::F32);  // this case checks the f32 path; the int8 one has its own below
  for (Isa level : supported_isas())
    for (DType t : matmul_types()) {  // every type the table says the kernels compute with
      set_isa(level);
      INFO("isa " << isa_name(level));
      // m: one input, odd counts, and more than one 64-row chunk; rows: tiles of 4 plus a tail;
      // cols: a tail after the last 8-wide step where the type allows it.
      for (int64_t m : {1, 3, 17, 130}) {
        const uint32_t block = traits(t).block_size;
        const int64_t rows = 37, cols = block == 1 ? 100 : block == 32 ? 96 : 512;
        const bool plain = t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0;
        auto w = plain ? make_weights(t, rows, cols, rng) : make_random_blocks(t, rows, cols, rng);
        MatView mv{w.data(), t, cols, rows, *row_bytes(t, cols)};
        std::vector<float> x(size_t(m * cols)), y(size_t(m * rows)), yr(size_t(m * rows));
        std::normal_distribution<float> nd;
        for (auto& v : x) v = nd(rng);
        MatmulArgs a{mv, x.data(), cols, m, y.data(), rows, 0, rows};
        matmul(a);
        // A row range that starts off the tile grid gives the same values (threads split rows anywhere).
        CHECK(split_rows(a, 3) == y);
        MatmulArgs b = a;
        b.y = yr.data();
        ref::matmul(b);
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
          ref::dequantize_row(t, mv.row(r), row.data(), cols);
          for (int64_t i = 0; i < m; ++i) {
            double mag = 0;
            for (int64_t c = 0; c < cols; ++c) mag += std::fabs(double(row[size_t(c)]) * x[size_t(i * cols + c)]);
            INFO(dtype_name(t) << " m=" << m << " r=" << r);
            REQUIRE(std::fabs(y[size_t(i * rows + r)] - yr[size_t(i * rows + r)]) <= 1e-5 * mag + 1e-6);
          }
        }
        // optimized dequantization is exact
        std::vector<float> d1(static_cast<size_t>(cols)), d2(static_cast<size_t>(cols));
        dequantize_row(t, mv.row(5), d1.data(), cols);
        ref::dequantize_row(t, mv.row(5), d2.data(), cols);
        CHECK(d1 == d2);
      }
    }
  set_isa(detected_isa());
}

// Random quantized blocks: any bytes are valid except the fp16 scales, set small and finite.
std::vector<uint8_t> make_random_blocks(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const size_t bytes = *row_bytes(t, cols);
  const size_t block = traits(t).type_size;
  std::vector<uint8_t> out(size_t(rows) * bytes);
  for (auto& v : out) v = uint8_t(rng());
  for (size_t off = 0; off < out.size(); off += block) {
    if (t == DType::MXFP4) {  // the exponent byte: scales 2^−8 .. 2^−1
      out[off] = uint8_t(120 + rng() % 8);
      continue;
    }
    const uint16_t d = fp32_to_fp16(0.001f + 0.001f * float(rng() % 16)), dmin = fp32_to_fp16(0.002f);
    if (t == DType::IQ1_M) {  // its fp16 scale is the top nibbles of the four u16 scale words at 48
      for (int k = 0; k < 4; ++k) {
        uint16_t w;
        std::memcpy(&w, &out[off + 48 + 2 * size_t(k)], 2);
        w = uint16_t((w & 0x0fff) | (((d >> (4 * k)) & 15) << 12));
        std::memcpy(&out[off + 48 + 2 * size_t(k)], &w, 2);
      }
      continue;
    }
    // Where each type keeps its fp16 scale (and min): the end of the block for
    // Q6_K and Q3_K, after scales and values for Q2_K, else the start.
    const size_t at = t == DType::Q6_K || t == DType::Q3_K ? block - 2 : t == DType::Q2_K ? 80 : 0;
    std::memcpy(&out[off + at], &d, 2);
    if (t == DType::Q4_K || t == DType::Q5_K || t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q2_K)
      std::memcpy(&out[off + at + 2], &dmin, 2);
  }
  return out;
}

// Int8 activations (the default for every quantized type with Kernel::Int8). Two tolerances:
// - against the scalar reference (same quantization, integer block sums):
//   |opt − ref| ≤ 1e-5 · Σ|w·x| + 1e-6 (only the f32 accumulation order differs;
//   a one-step difference in any quantized activation would exceed it);
// - against exact f32 activations: each activation is off by at most half a
//   step d_x/2, so |int8 − f32| ≤ Σ_blocks (d_x/2) · Σ_block |w| (+ the first bound).
//
// m covers the decode kernels (1, 2) and the lane-vector kernel for prompts
// (matmul_int8_tile.cpp; 8 inputs per vector, tiles of 4 vectors, then 2, then
// 1): 5 (one part-filled vector), 16, 24, 40, and 70 (a 64-input chunk + 6).
// Every ISA level the CPU supports with an int8 path runs (AVX2; AVX-512 VNNI).
TEST_CASE("int8 activations: every quantized type against the scalar reference and the f32 product") {
  std::mt19937 rng(11);
  set_activations(Activations::Int8);
  std::vector<DType> types;
  for (DType t : matmul_types())
    if (traits(t).kernel == Kernel::Int8) types.push_back(t);
  REQUIRE(types.size() == 20);  // Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, the K-quants Q2_K…Q6_K, MXFP4, IQ4_NL/XS, 7 i-quants
  for (Isa level : supported_isas())
    for (DType t : types) {
      if (level < Isa::Avx2) continue;  // the generic level has no int8 path
      set_isa(level);
      const int64_t qb = traits(t).block_size == 256 ? 256 : 32;  // activation block
      for (int64_t m : {1, 2, 3, 4, 5, 7, 16, 24, 40, 70}) {
        const int64_t rows = 38, cols = 1024;
        auto w = t == DType::Q8_0 ? make_weights(t, rows, cols, rng) : make_random_blocks(t, rows, cols, rng);
        MatView mv{w.data(), t, cols, rows, *row_bytes(t, cols)};
        std::vector<float> x(size_t(m * cols)), y(size_t(m * rows)), yq(y.size()), yf(y.size());
        std::normal_distribution<float> nd;
        for (auto& v : x) v = nd(rng);
        x[7] = 0.0f, x[8] = -0.0f;                                  // zeros
        for (int64_t c = qb; c < 2 * qb; ++c) x[size_t(c)] = 0.0f;  // an all-zero block (d = 0)
        x[size_t(2 * qb + 3)] = 50.0f;                              // an outlier sets its block's scale
        MatmulArgs a{mv, x.data(), cols, m, y.data(), rows, 0, rows};
        matmul(a);
        // Rows split off the 4-row tile grid (as threads split them) give the same values.
        CHECK(split_rows(a, 7) == y);
        // Inputs quantized once beforehand (quantize_acts, as the layers share them)
        // give the same values; a pre-quantized copy in the other block format is ignored.
        {
          QuantizedActs xq, other;
          const ActBlocks fmt = act_blocks(t);
          REQUIRE(fmt != ActBlocks::None);
          quantize_acts(x.data(), cols, m, cols, fmt, xq);
          quantize_acts(x.data(), cols, m, cols, fmt == ActBlocks::Q8 ? ActBlocks::Q8K : ActBlocks::Q8, other);
          std::vector<float> yp(y.size()), yo(y.size());
          MatmulArgs p = a, o = a;
          p.y = yp.data(), p.xq = &xq;
          o.y = yo.data(), o.xq = &other;
          matmul(p);
          matmul(o);
          CHECK(yp == y);
          CHECK(yo == y);
          // Rows gathered out of the quantized copy (a MoE expert's tokens) are
          // the blocks quantizing those rows of x gives, and compute the same.
          if (m > 1) {
            const std::vector<int64_t> pick = {m - 1, 0};
            std::vector<float> xg(size_t(2 * cols));
            for (size_t i = 0; i < pick.size(); ++i)
              std::copy_n(x.data() + pick[i] * cols, cols, xg.data() + i * size_t(cols));
            QuantizedActs g;
            gather_act_rows(xq, pick.data(), 2, g);
            std::vector<float> yg(size_t(2 * rows)), yx(size_t(2 * rows));
            matmul({mv, xg.data(), cols, 2, yx.data(), rows, 0, rows});
            matmul({mv, xg.data(), cols, 2, yg.data(), rows, 0, rows, &g});
            CHECK(g.m == 2);
            CHECK(yg == yx);
          }
        }
        // Below the lane-vector kernel's threshold an input's values do not depend
        // on the others in the call (batched decode equals one at a time, bit for
        // bit): 4 inputs, or 8 for the K-quants where 32 registers hold 4 inputs'
        // accumulators (batched decode's dense matrices stay on the row kernels).
        const bool k_rows = (t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K) && level >= Isa::Avx512Vnni;
        if (m < (k_rows ? 8 : 4))
          for (int64_t i = 0; i < m; ++i) {
            std::vector<float> alone(static_cast<size_t>(rows));
            matmul({mv, x.data() + i * cols, cols, 1, alone.data(), rows, 0, rows});
            CHECK(std::equal(alone.begin(), alone.end(), y.begin() + i * rows));
          }
        MatmulArgs q = a, f = a;
        q.y = yq.data(), f.y = yf.data();
        ref::matmul_int8(q);
        ref::matmul(f);
        std::vector<float> row(static_cast<size_t>(cols));
        std::vector<double> mags(y.size());  // Σ|w·x| per output
        for (int64_t r = 0; r < rows; ++r) {
          ref::dequantize_row(t, mv.row(r), row.data(), cols);
          for (int64_t i = 0; i < m; ++i) {
            double& mag = mags[size_t(i * rows + r)];
            double bound = 0;
            for (int64_t b = 0; b < cols / qb; ++b) {
              double amax = 0, wsum = 0;
              for (int64_t c = b * qb; c < (b + 1) * qb; ++c) {
                amax = std::max(amax, double(std::fabs(x[size_t(i * cols + c)])));
                wsum += std::fabs(row[size_t(c)]);
                mag += std::fabs(double(row[size_t(c)]) * x[size_t(i * cols + c)]);
              }
              bound += amax / 127.0 / 2.0 * wsum;
            }
            INFO(isa_name(level) << " " << dtype_name(t) << " m=" << m << " r=" << r << " i=" << i);
            const float got = y[size_t(i * rows + r)];
            REQUIRE(std::fabs(got - yq[size_t(i * rows + r)]) <= 1e-5 * mag + 1e-6);
            REQUIRE(std::fabs(got - yf[size_t(i * rows + r)]) <= bound * 1.0001 + 1e-5 * mag + 1e-6);
          }
        }
        // The f32 setting restores the f32 product.
        set_activations(Activations::F32);
        std::vector<float> y32(y.size());
        MatmulArgs e = a;
        e.y = y32.data();
        matmul(e);
        for (size_t k = 0; k < y.size(); ++k) REQUIRE(std::fabs(y32[k] - yf[k]) <= 1e-5 * mags[k] + 1e-6);
        set_activations(Activations::Int8);
      }
    }
  set_isa(detected_isa());
}

// Tolerance: each e^x within 4e-7 relative of std::exp (below f32's normal
// range: 0 or a value under 1.2e-38), the sum within 1e-6 relative; the
// scaled scores and their max are the same bits (one multiply each).
// SwiGLU's silu(g)·u: the same exponential as the softmax's, then one divide
// and one multiply, so within 1e-6 relative (or 1e-30 absolute, where std::exp
// overflows to inf and the kernel's capped e^88 leaves g / 1.6e38).
TEST_CASE("silu_mul matches the reference at every ISA level, in place too") {
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> ud(-30.0f, 30.0f);
  for (Isa level : supported_isas()) {
    set_isa(level);
    for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 100, 512, 1403}) {
      std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
      for (auto& x : g) x = ud(rng);
      for (auto& x : u) x = ud(rng);
      if (n > 4) g[0] = -200.0f, g[1] = 200.0f, g[2] = 0.0f, g[3] = -87.0f;  // past both ends, zero, the edge
      std::vector<float> a(g.size()), b(g.size());
      silu_mul(g.data(), u.data(), a.data(), n);
      ref::silu_mul(g.data(), u.data(), b.data(), n);
      for (int64_t j = 0; j < n; ++j) {
        INFO(isa_name(level) << " n=" << n << " g=" << g[size_t(j)] << " u=" << u[size_t(j)]);
        REQUIRE(std::fabs(a[size_t(j)] - b[size_t(j)]) <= 1e-6f * std::fabs(b[size_t(j)]) + 1e-30f);
      }
      std::vector<float> in_place = g;  // h aliasing g, as the engine calls it
      silu_mul(in_place.data(), u.data(), in_place.data(), n);
      REQUIRE(in_place == a);
    }
  }
  set_isa(detected_isa());
}

TEST_CASE("softmax pieces (scale and max, exponentials and their sum) match the reference at every ISA level") {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> ud(-40.0f, 40.0f);
  for (Isa level : supported_isas()) {
    set_isa(level);
    for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 64, 100, 1403}) {
      std::vector<float> p(static_cast<size_t>(n));
      for (auto& x : p) x = ud(rng);
      if (n > 3) p[1] = -1e9f, p[2] = 0.0f;  // far below the others; exactly the shift after scaling
      const float scale = 0.088388f;
      std::vector<float> a = p, b = p;
      const float ma = scale_max(a.data(), n, scale, -INFINITY), mb = ref::scale_max(b.data(), n, scale, -INFINITY);
      INFO(isa_name(level) << " n=" << n);
      REQUIRE(ma == mb);
      REQUIRE(a == b);
      const float shift = n > 0 ? ma : 0.0f;
      const float sa = exp_shift_sum(a.data(), n, shift), sb = ref::exp_shift_sum(b.data(), n, shift);
      for (int64_t j = 0; j < n; ++j) {
        INFO("j=" << j << " x=" << p[size_t(j)] * scale - shift);
        if (b[size_t(j)] < 1.2e-38f) REQUIRE(a[size_t(j)] < 1.2e-38f);
        else REQUIRE(std::fabs(a[size_t(j)] - b[size_t(j)]) <= 4e-7f * b[size_t(j)]);
      }
      REQUIRE(std::fabs(sa - sb) <= 1e-6f * sb + 1e-30f);
      // An init above every score is the max.
      std::vector<float> c = p;
      REQUIRE(scale_max(c.data(), n, scale, 1e6f) == 1e6f);
    }
    // Arguments across the whole range e^x takes in attention (x ≤ 0), and past it.
    std::vector<float> x;
    for (float v = -120.0f; v <= 0.0f; v += 0.0137f) x.push_back(v);
    std::vector<float> a = x, b = x;
    exp_shift_sum(a.data(), int64_t(a.size()), 0.0f);
    ref::exp_shift_sum(b.data(), int64_t(b.size()), 0.0f);
    for (size_t j = 0; j < x.size(); ++j) {
      INFO(isa_name(level) << " x=" << x[j]);
      if (b[j] < 1.2e-38f) REQUIRE(a[j] < 1.2e-38f);
      else REQUIRE(std::fabs(a[j] - b[j]) <= 4e-7f * b[j]);
    }
  }
  set_isa(detected_isa());
}

TEST_CASE("transposed accumulate matches a naive loop at every ISA level") {
  std::mt19937 rng(5);
  const int64_t rows = 24, cols = 40;
  auto w = make_weights(DType::F32, rows, cols, rng);
  MatView mv{w.data(), DType::F32, cols, rows, size_t(cols) * 4};
  std::vector<float> s(rows);
  for (auto& v : s) v = float(rng() % 100) / 50.0f - 1.0f;
  const float* wf = reinterpret_cast<const float*>(w.data());
  std::vector<float> yr(cols, 0.5f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) yr[size_t(c)] += s[size_t(r)] * wf[r * cols + c];
  for (Isa level : supported_isas()) {
    set_isa(level);
    INFO("isa " << isa_name(level));
    std::vector<float> y(cols, 0.5f);
    matmul_t_accumulate(mv, s.data(), y.data(), 0, rows);
    for (int64_t c = 0; c < cols; ++c) CHECK(std::fabs(y[size_t(c)] - yr[size_t(c)]) <= 1e-5f * 40);
  }
  set_isa(detected_isa());
}

TEST_CASE("Q4_0 and Q5_0 blocks dequantize by their layout") {
  // Q4_0: d = 0.5; byte j holds element j (low nibble) and j+16 (high nibble); x = d·(q − 8)
  uint8_t q4[18];
  const uint16_t half = fp32_to_fp16(0.5f);
  std::memcpy(q4, &half, 2);
  for (int j = 0; j < 16; ++j) q4[2 + j] = uint8_t(j | ((15 - j) << 4));
  float y[32];
  ref::dequantize_row(DType::Q4_0, q4, y, 32);
  for (int j = 0; j < 16; ++j) {
    CHECK(y[j] == 0.5f * float(j - 8));
    CHECK(y[j + 16] == 0.5f * float(7 - j));
  }
  // Q5_0: the fifth bit of element j is bit j of qh; x = d·(q − 16)
  uint8_t q5[22];
  std::memcpy(q5, &half, 2);
  const uint32_t qh = 0x0000ffffu;  // elements 0..15 have the high bit, 16..31 not
  std::memcpy(q5 + 2, &qh, 4);
  for (int j = 0; j < 16; ++j) q5[6 + j] = uint8_t(j | (j << 4));
  ref::dequantize_row(DType::Q5_0, q5, y, 32);
  for (int j = 0; j < 16; ++j) {
    CHECK(y[j] == 0.5f * float(j + 16 - 16));
    CHECK(y[j + 16] == 0.5f * float(j - 16));
  }
  CHECK(matmul_supports(DType::Q4_K));
  CHECK(!matmul_supports(DType::TQ1_0));
}

// Tolerance: bit-exact. The expected values come from std::ldexp (value ·
// 2^(E − 128)), not from the bit construction the decoders share, so the
// subnormal scales (E = 0, 1) and the overflow to inf (E = 255, |value| ≥ 2) are
// checked against the arithmetic ggml's dequantize_row_mxfp4 does.
TEST_CASE("MXFP4 blocks dequantize bit-exactly: every code, exponent extremes, every ISA level") {
  const int kValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  // Byte j: code j in the low nibble (element j), code 15 − j in the high one (element j + 16).
  std::vector<uint8_t> blocks;
  const std::vector<int> exps = {0, 1, 2, 3, 100, 126, 127, 128, 129, 200, 253, 254, 255};
  for (int e : exps) {
    blocks.push_back(uint8_t(e));
    for (int j = 0; j < 16; ++j) blocks.push_back(uint8_t(j | ((15 - j) << 4)));
  }
  const int64_t n = 32 * int64_t(exps.size());
  std::vector<float> expect(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (size_t b = 0; b < exps.size(); ++b)
    for (int j = 0; j < 16; ++j) {
      expect[32 * b + size_t(j)] = std::ldexp(float(kValues[j]), exps[b] - 128);
      expect[32 * b + size_t(j) + 16] = std::ldexp(float(kValues[15 - j]), exps[b] - 128);
    }
  CHECK(expect[32 * 0 + 1] == 0x1p-128f);  // E = 0: the subnormal 2^−128 (one of the table)
  CHECK(expect[32 * 7 + 7] == 12.0f);      // E = 128: the table itself
  CHECK(std::isinf(expect[32 * 12 + 2]));  // E = 255: 2 · 2^127 overflows
  CHECK(expect[32 * 12 + 1] == 0x1p127f);
  ref::dequantize_row(DType::MXFP4, blocks.data(), y.data(), n);
  CHECK(std::memcmp(y.data(), expect.data(), y.size() * sizeof(float)) == 0);
  for (int64_t i = 0; i < n; ++i) {
    INFO("element " << i << " (E = " << exps[size_t(i / 32)] << ")");
    REQUIRE(std::memcmp(&y[size_t(i)], &expect[size_t(i)], 4) == 0);  // code 8 is +0, not −0
  }
  // The optimised expansion (the f32 path's row_f32) at every level, on these blocks and on random
  // bytes (every exponent and code pattern).
  std::mt19937 rng(39);
  std::vector<uint8_t> rnd(17 * 256 * 4);
  for (auto& v : rnd) v = uint8_t(rng());
  for (size_t b = 0; b < 256; ++b) rnd[17 * b] = uint8_t(b);
  std::vector<float> r1(32 * 256 * 4), r2(r1.size());
  ref::dequantize_row(DType::MXFP4, rnd.data(), r2.data(), int64_t(r2.size()));
  for (Isa level : supported_isas()) {
    set_isa(level);
    INFO("isa " << isa_name(level));
    dequantize_row(DType::MXFP4, blocks.data(), y.data(), n);
    CHECK(std::memcmp(y.data(), expect.data(), y.size() * sizeof(float)) == 0);
    dequantize_row(DType::MXFP4, rnd.data(), r1.data(), int64_t(r1.size()));
    CHECK(std::memcmp(r1.data(), r2.data(), r1.size() * sizeof(float)) == 0);
  }
  set_isa(detected_isa());
  CHECK(traits(DType::MXFP4).block_size == 32);
  CHECK(traits(DType::MXFP4).type_size == 17);
  CHECK(row_bytes(DType::MXFP4, 2880) == 1530u);  // a gpt-oss expert row
}

TEST_CASE("one type table says what the kernels compute with, and every list reads it") {
  int computable = 0;
  for (uint32_t id = 0; id < kMaxTypeId; ++id) {
    const auto tr = dtype_traits(id);
    if (!tr) continue;
    const DType t = static_cast<DType>(id);
    INFO(tr->name);
    CHECK(matmul_supports(t) == (tr->kernel != Kernel::None));
    // Quantized types with an int8 path are block types; F32Only ones are plain element types.
    if (tr->kernel == Kernel::Int8) CHECK(tr->block_size >= 32);
    if (tr->kernel == Kernel::F32Only) CHECK(tr->block_size == 1);
    computable += tr->kernel != Kernel::None;
  }
  CHECK(int(matmul_types().size()) == computable);
  CHECK(matmul_type_names() ==
        "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, "
        "IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, MXFP4");
  CHECK(traits(DType::Q4_K).kernel == Kernel::Int8);
  CHECK(traits(DType::TQ1_0).kernel == Kernel::None);
}

// Tolerance: bit-exact (same arithmetic, same order). Random bytes make every
// scale, min and high-bit combination appear; the fp16 scales are kept finite.
TEST_CASE("SIMD K-quant expansion equals the reference bit for bit at every ISA level") {
  std::mt19937 rng(21);
  for (Isa level : supported_isas())
    for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
      set_isa(level);
      INFO("isa " << isa_name(level));
      const int64_t n = 256 * 8;
      std::vector<uint8_t> blocks(size_t(*row_bytes(t, uint64_t(n))));
      for (auto& b : blocks) b = uint8_t(rng());
      const size_t bs = traits(t).type_size;
      for (size_t off = 0; off < blocks.size(); off += bs) {
        const uint16_t d = fp32_to_fp16(0.01f * float(rng() % 100 + 1)), dm = fp32_to_fp16(0.001f * float(rng() % 100));
        if (t == DType::Q6_K) {
          std::memcpy(&blocks[off + bs - 2], &d, 2);  // Q6_K's d ends its block
        } else {
          std::memcpy(&blocks[off], &d, 2);
          std::memcpy(&blocks[off + 2], &dm, 2);
        }
      }
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      dequantize_row(t, blocks.data(), a.data(), n);
      ref::dequantize_row(t, blocks.data(), b.data(), n);
      INFO(dtype_name(t));
      CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    }
  set_isa(detected_isa());
}

#include "kernels/quantize.h"

namespace {
std::vector<float> gaussian(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng);
  return x;
}
}  // namespace

// Tolerance: each element within half a quantization step (d/2) plus the fp16
// rounding of d; Q4_0/Q5_0 anchor the scale on the signed extreme (as
// llama.cpp), so values of the other sign near the extreme clamp: one step.
TEST_CASE("quantize then dequantize stays within half a step") {
  const int64_t n = 32 * 64;
  std::vector<float> x = gaussian(n, 9), y(static_cast<size_t>(n));
  x[5] = 0;  // an all-but-one-zero block is fine too
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::F16, DType::BF16}) {
    std::vector<uint8_t> q(size_t(*row_bytes(t, uint64_t(n))));
    quantize_row(t, x.data(), q.data(), n);
    ref::dequantize_row(t, q.data(), y.data(), n);
    const float levels = t == DType::Q8_0 ? 127 : t == DType::Q4_0 ? 8 : t == DType::Q5_0 ? 16 : 0;
    for (int64_t b = 0; b < n; b += 32) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[size_t(b + j)]));
      for (int j = 0; j < 32; ++j) {
        const float err = std::fabs(x[size_t(b + j)] - y[size_t(b + j)]);
        const float steps = t == DType::Q8_0 ? 0.5f : 1.0f;
        const float tol =
            levels > 0 ? amax / levels * steps * 1.01f + amax * 1e-3f : std::fabs(x[size_t(b + j)]) * 4e-3f + 1e-7f;
        INFO(dtype_name(t) << " element " << b + j);
        REQUIRE(err <= tol);
      }
    }
  }
}

// K-quants search their scales, so the check is on the error as a whole: the
// RMS error relative to the RMS value on Gaussian data (measured ≈0.072 for
// Q4_K, 0.036 Q5_K, 0.017 Q6_K; bounds ~10% above), each K-quant better than
// the legacy type of its bits, no element off by more than three of its
// super-block's steps, and zeros kept exactly.
TEST_CASE("K-quant quantizers: error levels, ordering against Q4_0/Q5_0, zeros") {
  const int64_t n = 256 * 16;
  std::vector<float> x = gaussian(n, 21), y(static_cast<size_t>(n));
  for (int64_t i = 256; i < 512; ++i) x[size_t(i)] = 0;  // an all-zero super-block
  const auto rel_rmse = [&](DType t) {
    std::vector<uint8_t> q(size_t(*row_bytes(t, uint64_t(n))));
    quantize_row(t, x.data(), q.data(), n);
    ref::dequantize_row(t, q.data(), y.data(), n);
    double e2 = 0, x2 = 0, worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      e2 += double(x[size_t(i)] - y[size_t(i)]) * (x[size_t(i)] - y[size_t(i)]);
      x2 += double(x[size_t(i)]) * x[size_t(i)];
    }
    for (int64_t b = 0; b < n; b += 256) {
      float amax = 0;
      for (int64_t i = b; i < b + 256; ++i) amax = std::max(amax, std::fabs(x[size_t(i)]));
      const float levels = t == DType::Q4_K   ? 15
                           : t == DType::Q5_K ? 31
                           : t == DType::Q6_K ? 63
                           : t == DType::Q4_0 ? 15
                                              : 31;
      for (int64_t i = b; i < b + 256; ++i) {
        INFO(dtype_name(t) << " element " << i);
        REQUIRE(std::fabs(x[size_t(i)] - y[size_t(i)]) <= 3.0f * 2.0f * amax / levels);
        worst = std::max(worst, double(std::fabs(x[size_t(i)] - y[size_t(i)])));
      }
    }
    for (int64_t i = 256; i < 512; ++i) REQUIRE(y[size_t(i)] == 0.0f);
    return std::sqrt(e2 / x2);
  };
  const double q4k = rel_rmse(DType::Q4_K), q5k = rel_rmse(DType::Q5_K), q6k = rel_rmse(DType::Q6_K);
  const double q40 = rel_rmse(DType::Q4_0), q50 = rel_rmse(DType::Q5_0);
  INFO("relative RMSE: Q4_K " << q4k << " Q5_K " << q5k << " Q6_K " << q6k << " Q4_0 " << q40 << " Q5_0 " << q50);
  CHECK(q4k < 0.08);
  CHECK(q5k < 0.04);
  CHECK(q6k < 0.02);
  CHECK(q4k < q40);
  CHECK(q5k < q50);
  CHECK(q6k < q5k);
  WARN("relative RMSE: Q4_K " << q4k << ", Q5_K " << q5k << ", Q6_K " << q6k << " (Q4_0 " << q40 << ", Q5_0 " << q50
                              << ")");
}

namespace {
// One MXFP4 block of 32 values, quantized.
std::vector<uint8_t> mxfp4_of(const std::vector<float>& x) {
  std::vector<uint8_t> q(size_t(*row_bytes(DType::MXFP4, x.size())));
  quantize_row(DType::MXFP4, x.data(), q.data(), int64_t(x.size()));
  return q;
}
int mxfp4_code(const std::vector<uint8_t>& q, int element) {
  return element < 16 ? q[size_t(1 + element)] & 15 : q[size_t(1 + element - 16)] >> 4;
}
}  // namespace

// Tolerance: bit-exact. Cases computed by hand from ggml's quantize_row_mxfp4_ref:
// e = floor(log2 amax) − 2 + 127, d = 2^(e − 128), and each value takes the code
// whose value · d is nearest, the first in table order on a tie (table: 0, 1, 2,
// 3, 4, 6, 8, 12, then −0, −1, … −12 as codes 8..15).
TEST_CASE("MXFP4 quantizer picks ggml's exponent and nearest code, ties included") {
  // amax 6: floor(log2 6) = 2 → e = 127, d = 0.5; representable 0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6.
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f;     // 12·d → code 7
  x[1] = 1.25f;    // halfway 1 (code 2) and 1.5 (code 3): the first, code 2
  x[2] = -1.25f;   // halfway −1 (code 10) and −1.5 (code 11): code 10
  x[3] = 0.25f;    // halfway 0 and 0.5: code 0
  x[4] = 0.26f;    // nearer 0.5: code 1
  x[5] = -0.0f;    // code 0 (+0), never 8
  x[6] = 5.0f;     // halfway 4 (code 6) and 6 (code 7): code 6
  x[7] = 2.5f;     // halfway 2 (code 4) and 3 (code 5): code 4
  x[16] = -6.0f;   // code 15
  x[17] = -3.3f;   // nearest −3: code 13
  x[18] = 0.74f;   // nearest 0.5: code 1
  x[19] = 1e-30f;  // code 0
  x[31] = -0.26f;  // code 9
  auto q = mxfp4_of(x);
  CHECK(q[0] == 127);
  const int want[32] = {7,  2,  10, 0, 1, 0, 6, 4, 0, 0, 0, 0, 0, 0, 0, 0,
                        15, 13, 1,  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9};
  for (int j = 0; j < 32; ++j) {
    INFO("element " << j);
    CHECK(mxfp4_code(q, j) == want[j]);
  }
  // amax 10: floor(log2 10) = 3 → e = 128, d = 1; 7 is halfway 6 and 8: code 5; −8 is code 14.
  std::fill(x.begin(), x.end(), 0.0f);
  x[0] = -8.0f, x[1] = 7.0f, x[2] = 10.0f - 1e-6f, x[3] = 10.0f;  // below halfway 8/12: 8; halfway: 8
  q = mxfp4_of(x);
  CHECK(q[0] == 128);
  CHECK(mxfp4_code(q, 0) == 14);
  CHECK(mxfp4_code(q, 1) == 5);
  CHECK(mxfp4_code(q, 2) == 6);
  CHECK(mxfp4_code(q, 3) == 6);
  // amax just below a power of two keeps the lower exponent: 7.999 → floor(log2) = 2 → e = 127,
  // d = 0.5, so 7.999 clamps to 6 (code 7); amax in [12d, 16d) is the clamped range.
  x[0] = 7.999f, x[1] = x[2] = x[3] = 0.0f;
  q = mxfp4_of(x);
  CHECK(q[0] == 127);
  CHECK(mxfp4_code(q, 0) == 7);
  // Extremes: all zeros → e = 0 and zero codes; the largest floats → e = 252 (2^124 steps);
  // tiny normals → small exponents.
  std::fill(x.begin(), x.end(), 0.0f);
  q = mxfp4_of(x);
  CHECK(std::all_of(q.begin(), q.end(), [](uint8_t b) { return b == 0; }));
  x[0] = 3.0e38f;  // 3e38 / 2^124 ≈ 14.1 → 12 (code 7)
  q = mxfp4_of(x);
  CHECK(q[0] == 252);
  CHECK(mxfp4_code(q, 0) == 7);
  x[0] = 0x1p-120f;  // floor(log2) = −120 → e = 5, d = 2^−123: 2^−120 = 8·d (code 6)
  q = mxfp4_of(x);
  CHECK(q[0] == 5);
  CHECK(mxfp4_code(q, 0) == 6);
}

// Tolerance: per element, half the gap between the two representable values
// around it (gaps d, 2d, 4d below 4d, 8d, 12d); above 12d (amax reaches 16d at
// most) the value clamps to ±12d, off by |x| − 12d. Signs and zeros are kept.
// A block of values already on the grid whose largest code is ±8 or ±12 comes
// back byte for byte (its amax gives the same exponent).
TEST_CASE("MXFP4 quantize then dequantize: within half a step, grid values round-trip") {
  const int64_t n = 32 * 256;
  std::vector<float> x = gaussian(n, 5), y(static_cast<size_t>(n));
  for (int64_t i = 32; i < 64; ++i) x[size_t(i)] = 0.0f;  // an all-zero block
  std::vector<uint8_t> q(size_t(*row_bytes(DType::MXFP4, uint64_t(n))));
  quantize_row(DType::MXFP4, x.data(), q.data(), n);
  ref::dequantize_row(DType::MXFP4, q.data(), y.data(), n);
  double e2 = 0, x2 = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    const float d = std::ldexp(1.0f, int(q[size_t(17 * b)]) - 128);
    for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
      const float v = std::fabs(x[size_t(i)]), err = std::fabs(x[size_t(i)] - y[size_t(i)]);
      const float tol = v > 12 * d ? v - 12 * d : v > 8 * d ? 2 * d : v > 4 * d ? d : 0.5f * d;
      INFO("element " << i << " x " << x[size_t(i)] << " y " << y[size_t(i)] << " d " << d);
      REQUIRE(err <= tol * (1 + 1e-6f));
      REQUIRE((y[size_t(i)] == 0 || std::signbit(y[size_t(i)]) == std::signbit(x[size_t(i)])));
      if (x[size_t(i)] == 0) REQUIRE(y[size_t(i)] == 0);
      e2 += double(err) * err, x2 += double(x[size_t(i)]) * x[size_t(i)];
    }
  }
  WARN("MXFP4 relative RMSE on Gaussian data: " << std::sqrt(e2 / x2));
  CHECK(std::sqrt(e2 / x2) < 0.12);
  // Grid values: random codes without −0 (code 8), one of ±8/±12 in each block, exponents 3..250.
  std::mt19937 rng(7);
  std::vector<uint8_t> g(q.size());
  for (int64_t b = 0; b < n / 32; ++b) {
    uint8_t* blk = g.data() + 17 * b;
    blk[0] = uint8_t(3 + rng() % 248);
    for (int j = 1; j < 17; ++j) {
      int lo = int(rng() % 15), hi = int(rng() % 15);
      blk[j] = uint8_t((lo >= 8 ? lo + 1 : lo) | ((hi >= 8 ? hi + 1 : hi) << 4));
    }
    const int big[4] = {6, 7, 14, 15};
    uint8_t& at = blk[1 + rng() % 16];
    at = uint8_t(big[rng() % 4] | (at & 0xf0));
  }
  ref::dequantize_row(DType::MXFP4, g.data(), y.data(), n);
  quantize_row(DType::MXFP4, y.data(), q.data(), n);
  CHECK(q == g);
}
