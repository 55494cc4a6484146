// Attention's P·V (y = P·V, P [m][n_v] probabilities, V [n_v][n] values).
// Performance model: a 4-row × 32-column register tile (16 accumulators; 64
// columns in zmm) takes 4 loads of V and 4 broadcasts of P per 16 FMAs, so V
// streams from cache once per 4 query rows instead of once per row as a
// row-at-a-time axpy does.
//
// GCC 12's 512-bit intrinsics start from _mm512_undefined_*, which it then
// reports as used uninitialized (GCC bug 105593): a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../quant_blocks.h"
#include "attention_bf16.h"
#include "kernels/convert.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "lines_ahead.h"

namespace moelsp::kernels {
namespace {

// Rows i0 .. i0 + R − 1, columns c0 .. c0 + 8·NC − 1. Half: V is F16 (a.v_f16),
// widened as it is loaded (exact, so the sums are the F32 path's on the same values).
template <bool Half>
__attribute__((target("avx2,fma,f16c"))) inline __m256 load_v(const WeightedRowsArgs& a, int64_t j, int64_t c) {
  if constexpr (Half)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.v_f16 + j * a.ldv + c)));
  else return _mm256_loadu_ps(a.v + j * a.ldv + c);
}

template <int R, int NC, bool Half>
__attribute__((target("avx2,fma,f16c"))) void tile(const WeightedRowsArgs& a, int64_t i0, int64_t c0) {
  __m256 acc[R][NC];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c)
      acc[r][c] = a.accumulate ? _mm256_loadu_ps(a.y + (i0 + r) * a.ldy + c0 + 8 * c) : _mm256_setzero_ps();
  for (int64_t j = 0; j < a.n_v; ++j) {
    __m256 vv[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) vv[c] = load_v<Half>(a, j, c0 + 8 * c);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 p = _mm256_set1_ps(a.p[(i0 + r) * a.ldp + j]);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm256_fmadd_ps(p, vv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) _mm256_storeu_ps(a.y + (i0 + r) * a.ldy + c0 + 8 * c, acc[r][c]);
}

template <int R, bool Half>
__attribute__((target("avx2,fma,f16c"))) void rows_avx2(const WeightedRowsArgs& a, int64_t i0, int64_t c = 0) {
  for (; c + 32 <= a.n; c += 32) tile<R, 4, Half>(a, i0, c);
  for (; c + 8 <= a.n; c += 8) tile<R, 1, Half>(a, i0, c);
  // A column tail (head sizes are multiples of 8 in practice), one explicit
  // fused multiply-add per term, as the tiles do: the sums must not depend on
  // how the compiler contracted each instantiation's loop.
  for (; c < a.n; ++c)
    for (int r = 0; r < R; ++r) {
      float s = a.accumulate ? a.y[(i0 + r) * a.ldy + c] : 0.0f;
      for (int64_t j = 0; j < a.n_v; ++j)
        s = std::fma(a.p[(i0 + r) * a.ldp + j], Half ? fp16_to_fp32(a.v_f16[j * a.ldv + c]) : a.v[j * a.ldv + c], s);
      a.y[(i0 + r) * a.ldy + c] = s;
    }
}

template <bool Half>
void weighted_rows_avx2(const WeightedRowsArgs& a) {
  int64_t i = 0;
  for (; i + 4 <= a.m; i += 4) rows_avx2<4, Half>(a, i);
  for (; i < a.m; ++i) rows_avx2<1, Half>(a, i);
}

// The same tiles in zmm (4 rows × 64 columns): each lane's sum is the same
// chain of FMAs in the same order, so the results are the AVX2 path's bits.
// Half the instructions per FMA (loads, conversions, broadcasts); on Zen 4
// the FMA rate is the same, on a Xeon with two 512-bit units it doubles.
enum class VKind { F32, F16, Q8_0 };

template <VKind K>
__attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma,f16c"))) inline __m512 load_v16(const WeightedRowsArgs& a,
                                                                                          int64_t j, int64_t c) {
  if constexpr (K == VKind::F16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.v_f16 + j * a.ldv + c)));
  } else if constexpr (K == VKind::Q8_0) {  // d·q, exact in f32: the dequantized row's value
    const uint8_t* b = a.v_q8 + size_t(j) * a.v_q8_stride + size_t(c / 32) * sizeof(blocks::Q8_0);
    uint16_t d;
    std::memcpy(&d, b, 2);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + c % 32));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(d)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
  } else {
    return _mm512_loadu_ps(a.v + j * a.ldv + c);
  }
}

using detail::Spread;

template <int R, int NC, VKind K>
__attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma,f16c"))) void tile512(const WeightedRowsArgs& a, int64_t i0,
                                                                                int64_t c0, Spread& sp) {
  __m512 acc[R][NC];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c)
      acc[r][c] = a.accumulate ? _mm512_loadu_ps(a.y + (i0 + r) * a.ldy + c0 + 16 * c) : _mm512_setzero_ps();
  const uint8_t* pf = sp.p;
  int64_t left = sp.left;
  for (int64_t j = 0; j < a.n_v; ++j) {
    detail::spread_step(pf, left, sp.per);
    __m512 vv[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) vv[c] = load_v16<K>(a, j, c0 + 16 * c);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 p = _mm512_set1_ps(a.p[(i0 + r) * a.ldp + j]);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_fmadd_ps(p, vv[c], acc[r][c]);
    }
  }
  sp.p = pf, sp.left = left;
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(a.y + (i0 + r) * a.ldy + c0 + 16 * c, acc[r][c]);
}

template <int R, VKind K>
void rows_avx512(const WeightedRowsArgs& a, int64_t i0, Spread& sp) {
  int64_t c = 0;
  for (; c + 64 <= a.n; c += 64) tile512<R, 4, K>(a, i0, c, sp);
  for (; c + 16 <= a.n; c += 16) tile512<R, 1, K>(a, i0, c, sp);
  if constexpr (K != VKind::Q8_0)  // (Q8_0 rows come in whole blocks of 32)
    if (c < a.n) rows_avx2<R, K == VKind::F16>(a, i0, c);
}

template <VKind K>
void weighted_rows_avx512(const WeightedRowsArgs& a) {
  // a.ahead over the tiles' keys: (row groups) × (column tiles) × n_v steps
  const int64_t steps = std::max<int64_t>(1, (a.m / 4 + a.m % 4) * (a.n / 64 + a.n % 64 / 16) * a.n_v);
  Spread sp = detail::spread(a.ahead, steps);
  int64_t i = 0;
  for (; i + 4 <= a.m; i += 4) rows_avx512<4, K>(a, i, sp);
  for (; i < a.m; ++i) rows_avx512<1, K>(a, i, sp);
  prefetch_lines({sp.p, sp.left});  // (none left unless the tiles did not cover the columns)
}

// Q8_0 values below AVX-512, and BF16 values below Isa::Avx512Bf16: the rows
// widened into a buffer (exactly), then the f32 path.
void weighted_rows_widened(const WeightedRowsArgs& a) {
  thread_local std::vector<float> wide;
  wide.resize(size_t(a.n_v) * size_t(a.n));
  for (int64_t j = 0; j < a.n_v; ++j) {
    float* out = wide.data() + size_t(j) * size_t(a.n);
    if (a.v_q8) dequantize_row(DType::Q8_0, a.v_q8 + size_t(j) * a.v_q8_stride, out, a.n);
    else dequantize_row(DType::BF16, a.v_bf16 + j * a.ldv, out, a.n);
  }
  WeightedRowsArgs f = a;
  f.v = wide.data(), f.ldv = a.n, f.v_q8 = nullptr, f.v_bf16 = nullptr, f.ahead = {};
  weighted_rows(f);
}

}  // namespace

void weighted_rows(const WeightedRowsArgs& a) {
  const Isa isa = kernel_config().isa;
  if (a.v_bf16) {
    if (isa >= Isa::Avx512Bf16) return detail::weighted_rows_bf16(a);
    prefetch_lines(a.ahead);
    return weighted_rows_widened(a);
  }
  if (isa >= Isa::Avx512Vnni) {
    if (a.v_q8) return weighted_rows_avx512<VKind::Q8_0>(a);
    return a.v_f16 ? weighted_rows_avx512<VKind::F16>(a) : weighted_rows_avx512<VKind::F32>(a);
  }
  prefetch_lines(a.ahead);
  if (a.v_q8) return weighted_rows_widened(a);
  if (isa < Isa::Avx2) return ref::weighted_rows(a);
  if (a.v_f16) weighted_rows_avx2<true>(a);
  else weighted_rows_avx2<false>(a);
}

}  // namespace moelsp::kernels
