// Attention's P·V (y = P·V, P [m][n_v] probabilities, V [n_v][n] values).
// Performance model: a 4-row × 32-column register tile (16 accumulators) takes
// 4 loads of V and 4 broadcasts of P per 16 FMAs, so V streams from cache
// once per 4 query rows instead of once per row as a row-at-a-time axpy does.
#include <immintrin.h>

#include "kernels/isa.h"
#include "kernels/matmul.h"

namespace moelsp::kernels {
namespace {

// Rows i0 .. i0 + R − 1, columns c0 .. c0 + 8·NC − 1.
template <int R, int NC>
__attribute__((target("avx2,fma"))) void tile(const WeightedRowsArgs& a, int64_t i0, int64_t c0) {
  __m256 acc[R][NC];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c)
      acc[r][c] = a.accumulate ? _mm256_loadu_ps(a.y + (i0 + r) * a.ldy + c0 + 8 * c) : _mm256_setzero_ps();
  for (int64_t j = 0; j < a.n_v; ++j) {
    const float* v = a.v + j * a.ldv + c0;
    __m256 vv[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) vv[c] = _mm256_loadu_ps(v + 8 * c);
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

template <int R>
__attribute__((target("avx2,fma"))) void rows_avx2(const WeightedRowsArgs& a, int64_t i0) {
  int64_t c = 0;
  for (; c + 32 <= a.n; c += 32) tile<R, 4>(a, i0, c);
  for (; c + 8 <= a.n; c += 8) tile<R, 1>(a, i0, c);
  for (; c < a.n; ++c)  // a column tail (head sizes are multiples of 8 in practice)
    for (int r = 0; r < R; ++r) {
      float s = a.accumulate ? a.y[(i0 + r) * a.ldy + c] : 0.0f;
      for (int64_t j = 0; j < a.n_v; ++j) s += a.p[(i0 + r) * a.ldp + j] * a.v[j * a.ldv + c];
      a.y[(i0 + r) * a.ldy + c] = s;
    }
}

}  // namespace

void weighted_rows(const WeightedRowsArgs& a) {
  if (kernel_config().isa < Isa::Avx2) return ref::weighted_rows(a);
  int64_t i = 0;
  for (; i + 4 <= a.m; i += 4) rows_avx2<4>(a, i);
  for (; i < a.m; ++i) rows_avx2<1>(a, i);
}

}  // namespace moelsp::kernels
