// The AVX-512 attention tiles' closing sums (kernels/cpu/scores.cpp,
// kernels/cpu/attention_bf16.cpp): 16 accumulators, one per (row, key) of a
// 4 × 4 tile, each reduced over its 16 lanes. Pairs are interleaved and
// added (unpack lo/hi in f32, then f64 pairs, then 128-bit lanes twice): 45
// ops for the 16 sums, which land as one vector holding the tile's 4 × 4
// scores row by row, instead of ~6 ops a sum one at a time.
#pragma once

// GCC 12's 512-bit intrinsics start from _mm512_undefined_*, which it then
// reports as used uninitialized (GCC bug 105593): a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

namespace moelsp::kernels::detail {

// 16 vectors → one whose lane l is the sum of a[l]'s 16 lanes.
__attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma,f16c"), always_inline)) inline __m512 reduce16(
    const __m512 a[16]) {
  __m512 b[8], c[4];
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p)  // per 128-bit lane: a[2p]'s pair sums at 0 and 2, a[2p + 1]'s at 1 and 3
    b[p] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * p], a[2 * p + 1]), _mm512_unpackhi_ps(a[2 * p], a[2 * p + 1]));
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {  // per 128-bit lane: a[4q … 4q + 3]'s sums over that lane
    const __m512d x = _mm512_castps_pd(b[2 * q]), y = _mm512_castps_pd(b[2 * q + 1]);
    c[q] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  // Across the four 128-bit lanes: even lanes plus odd lanes, twice.
  const __m512 f0 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88), _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
  const __m512 f1 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], 0x88), _mm512_shuffle_f32x4(c[2], c[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(f0, f1, 0x88), _mm512_shuffle_f32x4(f0, f1, 0xDD));
}

// A tile's M × N scores (M, N ≤ 4) from its 16 accumulators into s (rows lds apart).
template <int M, int N>
__attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma,f16c"), always_inline)) inline void store_tile(
    const __m512 acc[16], float* s, int64_t lds) {
  alignas(64) float out[16];
  _mm512_store_ps(out, reduce16(acc));
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < N; ++j) s[i * lds + j] = out[i * 4 + j];
}

}  // namespace moelsp::kernels::detail
