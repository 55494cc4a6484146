// Attention's kernels against their references at every ISA level this CPU
// runs: the scores over a KV cache's rows (F32, F16, BF16, Q8_0 keys read where they
// lie) and P·V (F32 values, or F16 and Q8_0 read in place).
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "isa_levels.h"
#include "kernels/convert.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"

using namespace moelsp::kernels;

using moelsp::test::supported_isas;

namespace {

// Q8_0 rows of values q/64 (|q| ≤ 127): each block's scale 1/64, exact in
// fp16, so the rows hold exactly the F32 values. `ld` elements per row (a
// multiple of 32).
std::vector<uint8_t> q8_rows(const std::vector<float>& x, int64_t rows, int64_t ld) {
  std::vector<uint8_t> out(size_t(rows * ld / 32) * 34);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < ld / 32; ++b) {
      uint8_t* blk = out.data() + size_t(r * ld / 32 + b) * 34;
      const uint16_t d = fp32_to_fp16(1.0f / 64.0f);
      std::memcpy(blk, &d, 2);
      for (int i = 0; i < 32; ++i) blk[2 + i] = uint8_t(int8_t(std::lround(x[size_t(r * ld + b * 32 + i)] * 64.0f)));
    }
  return out;
}

}  // namespace

// Tolerance: |opt − ref| ≤ 1e-5 · Σ_c |q·k| + 1e-6 (f32 vs double accumulation).
// BF16 keys at Isa::Avx512Bf16 meet q rounded to bf16: within that bound of
// the reference on the rounded q, and within 2^-8 · Σ_c |q·k| of the exact one.
// Otherwise keys of every type hold the same values (q/64, |q| ≤ 127: exact in F16,
// BF16 and Q8_0 alike), so within one ISA level the types must also give the
// same bits (Q8_0 only where hd is a multiple of 32).
TEST_CASE("attention scores match the reference for F32, F16, BF16 and Q8_0 keys at every ISA level") {
  std::mt19937 rng(29);
  std::uniform_int_distribution<int> grid(-127, 127);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (Isa level : supported_isas())
    for (int64_t m : {1, 3, 4, 9})
      for (int64_t n : {1, 4, 7, 16, 33})
        for (int64_t hd : {8, 64, 100, 128, 576}) {  // a masked tail (8, 100), MLA's latent rows (576)
          set_isa(level);
          const int64_t ldq = hd + 3, ldk = (hd + 16 + 31) / 32 * 32, lds = n + 5;
          std::vector<float> q(size_t(m * ldq)), k32(size_t(n * ldk));
          std::vector<uint16_t> k16(k32.size()), kb16(k32.size());
          for (auto& x : q) x = nd(rng);
          for (size_t i = 0; i < k32.size(); ++i) {
            k32[i] = float(grid(rng)) / 64.0f;
            k16[i] = fp32_to_fp16(k32[i]), kb16[i] = fp32_to_bf16(k32[i]);
          }
          const std::vector<uint8_t> k8 = q8_rows(k32, n, ldk);
          std::vector<float> ref_s(size_t(m * lds), 7.0f);
          ScoresArgs a{q.data(), ldq, m, k32.data(), DType::F32, size_t(ldk) * 4, n, hd, ref_s.data(), lds};
          ref::scores(a);
          // BF16 keys meet q rounded to bf16 at Isa::Avx512Bf16 (vdpbf16ps): checked apart, below
          const bool dp = level >= Isa::Avx512Bf16;
          std::vector<float> bf_s(ref_s.size(), 7.0f), bf_ref(ref_s.size(), 7.0f), q_rounded(q);
          for (auto& x : q_rounded) x = bf16_to_fp32(fp32_to_bf16(x));
          if (dp) {
            ScoresArgs b = a;
            b.k = kb16.data(), b.k_type = DType::BF16, b.k_stride = size_t(ldk) * 2, b.s = bf_s.data();
            scores(b);
            b.q = q_rounded.data(), b.s = bf_ref.data();
            ref::scores(b);
          }
          std::vector<std::vector<float>> got;
          for (auto [t, k, stride] : {std::tuple{DType::F32, static_cast<const void*>(k32.data()), size_t(ldk) * 4},
                                      {DType::F16, k16.data(), size_t(ldk) * 2},
                                      {DType::BF16, kb16.data(), size_t(ldk) * 2},
                                      {DType::Q8_0, k8.data(), size_t(ldk / 32) * 34}}) {
            if ((t == DType::Q8_0 && hd % 32 != 0) || (t == DType::BF16 && dp)) continue;
            std::vector<float> s(ref_s.size(), 7.0f);
            ScoresArgs b = a;
            b.k = k, b.k_type = t, b.k_stride = stride, b.s = s.data();
            scores(b);
            got.push_back(s);
          }
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < lds; ++j) {
              INFO(isa_name(level) << " m=" << m << " n=" << n << " hd=" << hd << " i=" << i << " j=" << j);
              const size_t at = size_t(i * lds + j);
              if (j >= n) {  // columns past n are left alone
                for (const auto& s : got) REQUIRE(s[at] == 7.0f);
                REQUIRE(bf_s[at] == 7.0f);
                continue;
              }
              double mag = 0;
              for (int64_t c = 0; c < hd; ++c)
                mag += std::fabs(double(q[size_t(i * ldq + c)]) * k32[size_t(j * ldk + c)]);
              REQUIRE(std::fabs(got[0][at] - ref_s[at]) <= 1e-5 * mag + 1e-6);
              for (size_t t = 1; t < got.size(); ++t) REQUIRE(got[t][at] == got[0][at]);
              if (!dp) continue;
              // vdpbf16ps: f32 sums of the rounded q (as tight as f32 paths), and q's rounding (2^-9 a term)
              REQUIRE(std::fabs(bf_s[at] - bf_ref[at]) <= 1e-5 * mag + 1e-6);
              REQUIRE(std::fabs(bf_s[at] - ref_s[at]) <= std::ldexp(1.0, -8) * mag + 1e-6);
            }
        }
  set_isa(detected_isa());
}

// Tolerance: |opt − ref| ≤ 1e-5 · Σ_j |p·v| + 1e-6 (f32 vs double accumulation).
// V as F32, or as F16 or BF16 read in place (v_f16, v_bf16: a KV cache's rows); v holds the same values
// either way. BF16 values at Isa::Avx512Bf16 meet p rounded to bf16: within that bound of the reference on
// the rounded p, and within 2^-8 · Σ_j |p·v| of the exact sums.
TEST_CASE("P·V (weighted rows) matches the reference at every ISA level") {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  for (Isa level : supported_isas())
    for (int64_t m : {1, 3, 4, 9})
      for (int64_t n : {8, 36, 64, 128, 200})  // 32-column tiles, 8-column steps, a scalar tail
        for (bool acc : {false, true})         // overwrite y, or add to it (paged attention, block by block)
          for (int half : {0, 1, 2}) {         // V as F32, F16 or BF16
            set_isa(level);
            for (int64_t n_v : {1, 16, 37}) {  // one position, whole pairs, an odd one out
              const int64_t ldp = n_v + 3, ldv = n + 5, ldy = n + 2;
              std::vector<float> p(size_t(m * ldp)), v(size_t(n_v * ldv)), y(size_t(m * ldy), 7.0f), yr(y.size(), 7.0f);
              std::vector<uint16_t> v16(v.size());
              for (auto& x : p) x = std::fabs(ud(rng));
              for (size_t k = 0; k < v.size(); ++k)
                if (half == 2) v16[k] = fp32_to_bf16(ud(rng)), v[k] = bf16_to_fp32(v16[k]);
                else v16[k] = fp32_to_fp16(ud(rng)), v[k] = fp16_to_fp32(v16[k]);
              WeightedRowsArgs a{p.data(), ldp, m, v.data(), ldv, n_v, n, y.data(), ldy, acc};
              if (half == 1) a.v = nullptr, a.v_f16 = v16.data();
              if (half == 2) a.v = nullptr, a.v_bf16 = v16.data();
              weighted_rows(a);
              // BF16 values at Isa::Avx512Bf16 meet p rounded to bf16 (vdpbf16ps): the reference takes it so
              std::vector<float> p_rounded(p);
              const bool dp = half == 2 && level >= Isa::Avx512Bf16;
              if (dp)
                for (auto& x : p_rounded) x = bf16_to_fp32(fp32_to_bf16(x));
              WeightedRowsArgs b = a;
              b.p = p_rounded.data(), b.y = yr.data();
              ref::weighted_rows(b);
              for (int64_t i = 0; i < m; ++i)
                for (int64_t c = 0; c < ldy; ++c) {
                  INFO(isa_name(level) << " m=" << m << " n=" << n << " n_v=" << n_v << " i=" << i << " c=" << c
                                       << " acc=" << acc << " half=" << half);
                  if (c >= n) {  // columns past n are left alone
                    REQUIRE(y[size_t(i * ldy + c)] == 7.0f);
                    continue;
                  }
                  double mag = acc ? 7.0 : 0.0;
                  for (int64_t j = 0; j < n_v; ++j)
                    mag += std::fabs(double(p[size_t(i * ldp + j)]) * v[size_t(j * ldv + c)]);
                  REQUIRE(std::fabs(y[size_t(i * ldy + c)] - yr[size_t(i * ldy + c)]) <= 1e-5 * mag + 1e-6);
                  if (dp) {  // and p's rounding: 2^-9 a term
                    double exact = acc ? 7.0 : 0.0;
                    for (int64_t j = 0; j < n_v; ++j) exact += double(p[size_t(i * ldp + j)]) * v[size_t(j * ldv + c)];
                    REQUIRE(std::fabs(y[size_t(i * ldy + c)] - exact) <= std::ldexp(1.0, -8) * mag + 1e-6);
                  }
                }
            }
          }
  set_isa(detected_isa());
}

// Q8_0 values read in place (v_q8) widen to exactly the F32 values (q/64),
// so they must give the F32 path's bits at each ISA level; the reference
// bounds both.
TEST_CASE("P·V over Q8_0 rows gives the bits of the same values in F32") {
  std::mt19937 rng(31);
  std::uniform_int_distribution<int> grid(-127, 127);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (Isa level : supported_isas())
    for (int64_t m : {1, 4, 9})
      for (int64_t n : {32, 96, 128, 576})
        for (bool acc : {false, true}) {
          set_isa(level);
          const int64_t n_v = 19, ldp = n_v + 1, ldv = n + 32, ldy = n + 2;
          std::vector<float> p(size_t(m * ldp)), v(size_t(n_v * ldv)), y(size_t(m * ldy), 7.0f), yq(y), yr(y);
          for (auto& x : p) x = ud(rng);
          for (auto& x : v) x = float(grid(rng)) / 64.0f;
          const std::vector<uint8_t> v8 = q8_rows(v, n_v, ldv);
          WeightedRowsArgs a{p.data(), ldp, m, v.data(), ldv, n_v, n, y.data(), ldy, acc};
          weighted_rows(a);
          WeightedRowsArgs b = a;
          b.v = nullptr, b.v_q8 = v8.data(), b.v_q8_stride = size_t(ldv / 32) * 34, b.y = yq.data();
          weighted_rows(b);
          b.y = yr.data();
          ref::weighted_rows(b);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t c = 0; c < ldy; ++c) {
              INFO(isa_name(level) << " m=" << m << " n=" << n << " i=" << i << " c=" << c << " acc=" << acc);
              const size_t at = size_t(i * ldy + c);
              REQUIRE(yq[at] == y[at]);
              if (c >= n) continue;
              double mag = acc ? 7.0 : 0.0;
              for (int64_t j = 0; j < n_v; ++j)
                mag += std::fabs(double(p[size_t(i * ldp + j)]) * v[size_t(j * ldv + c)]);
              REQUIRE(std::fabs(yq[at] - yr[at]) <= 1e-5 * mag + 1e-6);
            }
        }
  set_isa(detected_isa());
}

// Lines requested ahead (the decode step's next chunk of KV rows) are a hint:
// spread over the tiles or requested at once, they change no bit of the
// results and leave the lines' memory as it was, for any number of lines
// against the kernel's steps (fewer, as many, several a step).
TEST_CASE("lines requested ahead change no result") {
  std::mt19937 rng(37);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  const int64_t m = 4, n = 16, hd = 128;
  std::vector<float> q(size_t(m * hd)), p(size_t(m * n));
  std::vector<uint16_t> k16(size_t(n * hd)), v16(size_t(n * hd)), kb(size_t(n * hd)), vb(size_t(n * hd));
  for (auto& x : q) x = ud(rng);
  for (auto& x : p) x = std::fabs(ud(rng));
  for (auto& x : k16) x = fp32_to_fp16(ud(rng));
  for (auto& x : v16) x = fp32_to_fp16(ud(rng));
  for (auto& x : kb) x = fp32_to_bf16(ud(rng));
  for (auto& x : vb) x = fp32_to_bf16(ud(rng));
  alignas(64) static uint8_t lines[64 * 600];
  for (size_t i = 0; i < sizeof lines; ++i) lines[i] = uint8_t(i * 7);
  // Both kernels over the same rows (F16, or BF16), with `ahead` requested on the side.
  const auto run = [&](bool bf, LinesAhead ahead, std::vector<float>& s, std::vector<float>& y) {
    s.assign(size_t(m * n), 0.0f), y.assign(size_t(m * hd), 0.0f);
    scores({.q = q.data(),
            .ldq = hd,
            .m = m,
            .k = bf ? kb.data() : k16.data(),
            .k_type = bf ? DType::BF16 : DType::F16,
            .k_stride = size_t(hd) * 2,
            .n = n,
            .hd = hd,
            .s = s.data(),
            .lds = n,
            .ahead = ahead});
    weighted_rows({.p = p.data(),
                   .ldp = n,
                   .m = m,
                   .ldv = hd,
                   .n_v = n,
                   .n = hd,
                   .y = y.data(),
                   .ldy = hd,
                   .v_f16 = bf ? nullptr : v16.data(),
                   .ahead = ahead,
                   .v_bf16 = bf ? vb.data() : nullptr});
  };
  for (Isa level : supported_isas())
    for (bool bf : {false, true}) {
      set_isa(level);
      std::vector<float> s0, y0, s, y;
      run(bf, {}, s0, y0);
      for (int64_t count : {1, 7, 32, 64, 600}) {
        INFO(isa_name(level) << " bf16=" << bf << " lines=" << count);
        run(bf, {lines, count}, s, y);
        REQUIRE(s == s0);
        REQUIRE(y == y0);
      }
    }
  for (size_t i = 0; i < sizeof lines; ++i) REQUIRE(lines[i] == uint8_t(i * 7));
  set_isa(detected_isa());
}
