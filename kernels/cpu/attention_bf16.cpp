// Attention's scores and P·V over BF16 KV rows with vdpbf16ps (Isa::Avx512Bf16):
// each instruction multiplies 16 pairs of bf16 and adds both products of a
// pair to an f32 lane, 32 multiply-adds where an f32 FMA does 16, and BF16
// rows need no widening at all.
//
// Performance model. A decode step at depth streams its KV rows from memory
// while these kernels run; on the 2-core Zen 5 VM the f32 kernels over F16
// rows computed at about the rate memory delivered (qwen3moe-mid: 4 kv heads
// of 128, 4 query rows each: ~77 ns a position a thread for 256 FMAs plus the
// widening), so compute and memory time added up. Here a position costs
// about half the instructions (measured: scores 30 → 14 ns, P·V 38 → 27 ns a
// position; kernels/cpu/scores.cpp and weighted_rows.cpp for the f32 tiles).
//
// Precision: the other operand is rounded to bf16 (round to nearest even)
// as it enters: q in the scores, the probabilities p in P·V. That is what
// GPU engines' bf16 attention does (FlashAttention computes P·V from bf16
// probabilities); a product then carries ≤ 2^-9 relative error from the
// rounding, and the sums stay f32. The reference checks in
// tests/test_attention_kernels.cpp take the rounded operand as given (tight
// bound) and as the caller's f32 (the rounding's bound).
//
// P·V contracts over positions, so two positions' values of a column must sit
// in one 32-bit lane: rows j and j + 1 are interleaved (unpacklo/hi_epi16),
// which leaves the columns of each 32-column group split between two
// accumulators (0-3, 8-11, … and 4-7, 12-15, …); the tile puts them back in
// order once, when it stores its sums.
//
// GCC 12's 512-bit intrinsics start from _mm512_undefined_*, which it then
// reports as used uninitialized (GCC bug 105593): a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstring>
#include <vector>

#include "attention_bf16.h"
#include "lines_ahead.h"
#include "reduce16.h"

namespace moelsp::kernels::detail {
namespace {

#define MOELSP_BF16 __attribute__((target("avx512f,avx512vl,avx512bw,avx512bf16,avx2,fma,f16c")))
#define MOELSP_BF16_INLINE \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512bf16,avx2,fma,f16c"), always_inline)) inline

// Elements [c, c + 32) of a row, as many as there are (mask), zeros after.
MOELSP_BF16_INLINE __mmask32 mask32(int64_t left) {
  return left >= 32 ? __mmask32(0xffffffffu) : __mmask32((uint64_t(1) << left) - 1);
}
MOELSP_BF16_INLINE __m512bh load32(const uint16_t* p, __mmask32 m) { return (__m512bh)_mm512_maskz_loadu_epi16(m, p); }

// n floats → bf16 (round to nearest even), padded with zeros to `padded` (a multiple of 32).
MOELSP_BF16 void round_row(const float* x, int64_t n, uint16_t* out, int64_t padded) {
  for (int64_t c = 0; c < padded; c += 32) {
    const int64_t left = n - c;
    const __mmask16 lo = left >= 16 ? __mmask16(0xffff) : left > 0 ? __mmask16((1u << left) - 1) : __mmask16(0);
    const __mmask16 hi = left >= 32 ? __mmask16(0xffff) : left > 16 ? __mmask16((1u << (left - 16)) - 1) : __mmask16(0);
    const __m512 a = _mm512_maskz_loadu_ps(lo, x + c), b = _mm512_maskz_loadu_ps(hi, x + c + 16);
    _mm512_storeu_si512(out + c, (__m512i)_mm512_cvtne2ps_pbh(b, a));
  }
}

// ---- scores: s[i][j] = q_i · k_j, 4 rows × 4 keys a tile, 32 elements a step ----

struct ScoresTile {
  const ScoresArgs& a;
  const uint16_t* qb;  // the rows rounded, `qpad` apart
  int64_t qpad;
};

template <int M, int N>
MOELSP_BF16 void scores_tile(const ScoresTile& t, int64_t i0, int64_t j0, Spread& sp) {
  const ScoresArgs& a = t.a;
  const auto* kb = static_cast<const uint8_t*>(a.k) + size_t(j0) * a.k_stride;
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  const uint8_t* pf = sp.p;
  int64_t left = sp.left;
  for (int64_t c = 0; c < a.hd; c += 32) {
    spread_step(pf, left, sp.per);
    const __mmask32 m = mask32(a.hd - c);
    __m512bh q[M];
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) q[i] = (__m512bh)_mm512_loadu_si512(t.qb + (i0 + i) * t.qpad + c);
#pragma GCC unroll 4
    for (int j = 0; j < N; ++j) {
      const __m512bh k = load32(reinterpret_cast<const uint16_t*>(kb + size_t(j) * a.k_stride) + c, m);
#pragma GCC unroll 4
      for (int i = 0; i < M; ++i) acc[i * 4 + j] = _mm512_dpbf16_ps(acc[i * 4 + j], q[i], k);
    }
  }
  sp.p = pf, sp.left = left;
  store_tile<M, N>(acc, a.s + i0 * a.lds + j0, a.lds);
}

template <int M>
void scores_row_tiles(const ScoresTile& t, int64_t i0, Spread& sp) {
  int64_t j = 0;
  for (; j + 4 <= t.a.n; j += 4) scores_tile<M, 4>(t, i0, j, sp);
  switch (t.a.n - j) {
    case 3: scores_tile<M, 3>(t, i0, j, sp); break;
    case 2: scores_tile<M, 2>(t, i0, j, sp); break;
    case 1: scores_tile<M, 1>(t, i0, j, sp); break;
    default: break;
  }
}

// ---- P·V: y[i][c] (+)= Σ_j p[i][j] · v_j[c], 4 rows × 64 columns a tile, 2 positions a step ----

struct PvTile {
  const WeightedRowsArgs& a;
  const uint16_t* pb;  // the probabilities rounded, `ppad` apart (zeros past n_v)
  int64_t ppad;
};

// NC 32-column groups from column c0 (the last one masked to the columns left).
template <int R, int NC>
MOELSP_BF16 void pv_tile(const PvTile& t, int64_t i0, int64_t c0, Spread& sp) {
  const WeightedRowsArgs& a = t.a;
  __m512 acc[R][2 * NC];  // [row][group g: 2g holds columns 0-3, 8-11, …; 2g + 1 holds 4-7, 12-15, …]
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int h = 0; h < 2 * NC; ++h) acc[r][h] = _mm512_setzero_ps();
  __mmask32 m[NC];
#pragma GCC unroll 2
  for (int g = 0; g < NC; ++g) m[g] = mask32(a.n - c0 - 32 * g);
  const uint8_t* pf = sp.p;
  int64_t left = sp.left;
  for (int64_t j = 0; j < a.n_v; j += 2) {
    spread_step(pf, left, sp.per);
    const uint16_t* v0 = a.v_bf16 + j * a.ldv + c0;
    __m512i w[2 * NC];
#pragma GCC unroll 2
    for (int g = 0; g < NC; ++g) {
      const __m512i x = _mm512_maskz_loadu_epi16(m[g], v0 + 32 * g);
      const __m512i y = j + 1 < a.n_v ? _mm512_maskz_loadu_epi16(m[g], v0 + a.ldv + 32 * g) : _mm512_setzero_si512();
      w[2 * g] = _mm512_unpacklo_epi16(x, y), w[2 * g + 1] = _mm512_unpackhi_epi16(x, y);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      int32_t pair;  // (p[r][j], p[r][j + 1]) as one 32-bit lane
      std::memcpy(&pair, t.pb + (i0 + r) * t.ppad + j, 4);
      const __m512bh p = (__m512bh)_mm512_set1_epi32(pair);
#pragma GCC unroll 4
      for (int h = 0; h < 2 * NC; ++h) acc[r][h] = _mm512_dpbf16_ps(acc[r][h], (__m512bh)w[h], p);
    }
  }
  sp.p = pf, sp.left = left;
  const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i hi = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int g = 0; g < NC; ++g) {
      float* y = a.y + (i0 + r) * a.ldy + c0 + 32 * g;
      const __mmask16 m0 = __mmask16(m[g]), m1 = __mmask16(m[g] >> 16);
      __m512 s0 = _mm512_permutex2var_ps(acc[r][2 * g], lo, acc[r][2 * g + 1]);
      __m512 s1 = _mm512_permutex2var_ps(acc[r][2 * g], hi, acc[r][2 * g + 1]);
      if (a.accumulate) {
        s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(m0, y));
        s1 = _mm512_add_ps(s1, _mm512_maskz_loadu_ps(m1, y + 16));
      }
      _mm512_mask_storeu_ps(y, m0, s0);
      _mm512_mask_storeu_ps(y + 16, m1, s1);
    }
}

template <int R>
void pv_rows(const PvTile& t, int64_t i0, Spread& sp) {
  int64_t c = 0;
  for (; c + 64 <= t.a.n; c += 64) pv_tile<R, 2>(t, i0, c, sp);
  for (; c < t.a.n; c += 32) pv_tile<R, 1>(t, i0, c, sp);  // the last one masked
}

}  // namespace

void round_rows_bf16(const float* x, int64_t rows, int64_t ldx, int64_t n, uint16_t* out) {
  const int64_t pad = bf16_row_stride(n);
  for (int64_t i = 0; i < rows; ++i) round_row(x + i * ldx, n, out + i * pad, pad);
}

void scores_bf16(const ScoresArgs& a) {
  const int64_t qpad = bf16_row_stride(a.hd);
  thread_local std::vector<uint16_t> qb;
  if (!a.q_bf16) {
    qb.resize(size_t(a.m * qpad));
    round_rows_bf16(a.q, a.m, a.ldq, a.hd, qb.data());
  }
  const ScoresTile t{a, a.q_bf16 ? a.q_bf16 : qb.data(), qpad};
  Spread sp = spread(a.ahead, (a.m + 3) / 4 * ((a.n + 3) / 4) * (qpad / 32));
  int64_t i = 0;
  for (; i + 4 <= a.m; i += 4) scores_row_tiles<4>(t, i, sp);
  switch (a.m - i) {
    case 3: scores_row_tiles<3>(t, i, sp); break;
    case 2: scores_row_tiles<2>(t, i, sp); break;
    case 1: scores_row_tiles<1>(t, i, sp); break;
    default: break;
  }
  prefetch_lines({sp.p, sp.left});  // (none left: the steps cover them)
}

void weighted_rows_bf16(const WeightedRowsArgs& a) {
  const int64_t ppad = bf16_row_stride(a.n_v);
  thread_local std::vector<uint16_t> pb;
  pb.resize(size_t(a.m * ppad));
  round_rows_bf16(a.p, a.m, a.ldp, a.n_v, pb.data());
  const PvTile t{a, pb.data(), ppad};
  const int64_t groups = a.n / 64 + (a.n % 64 + 31) / 32;
  Spread sp = spread(a.ahead, std::max<int64_t>(1, (a.m / 4 + a.m % 4) * groups * ((a.n_v + 1) / 2)));
  int64_t i = 0;
  for (; i + 4 <= a.m; i += 4) pv_rows<4>(t, i, sp);
  for (; i < a.m; ++i) pv_rows<1>(t, i, sp);
  prefetch_lines({sp.p, sp.left});
}

}  // namespace moelsp::kernels::detail
