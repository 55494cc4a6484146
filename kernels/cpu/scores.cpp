// Attention's scores s = Q·Kᵀ over a KV cache's rows where they lie (F32,
// F16, BF16 or Q8_0), for a job's query rows against a stretch of
// consecutive keys.
//
// Performance model. Each score is a 128-element (head size) dot product
// whose operands both run along the contracted dimension, so every (row, key)
// pair ends in a horizontal sum. matmul's ymm tiles (the path below AVX-512,
// and before this kernel at every level) pay a ~6-op hsum per (row, key):
// ~40 % on top of a 4 × 4 tile's 64 FMAs over a 128-element head (measured:
// a qwen3moe-mid decode step's attention spent as long in the scores as in
// P·V, which has no sums).
// The AVX-512 tile keeps 16 zmm accumulators (4 rows × 4 keys, 16 elements a
// step), widens each key's 16 halves once for the 4 rows, and reduces the 16
// accumulators together (detail::reduce16, 45 ops for the 16 sums).
// On Zen 4 (AVX-512 on 256-bit units) the FMAs cost what they cost in ymm;
// the saving is the sums and half the loads, conversions and loop overhead.
// A Xeon with two 512-bit FMA units also doubles the FMA rate.
//
// The sums' order differs from the AVX2 path's, so results differ in the last
// bits between ISA levels; within one level every key type takes the same
// path, so F16 keys and the same values widened to F32 give the same bits.
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

#include "../quant_blocks.h"
#include "attention_bf16.h"
#include "kernels/convert.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "lines_ahead.h"
#include "reduce16.h"

namespace moelsp::kernels {
namespace {

#define MOELSP_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma,f16c")))
#define MOELSP_AVX512_INLINE __attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma,f16c"), always_inline)) inline

using detail::Spread;
using detail::spread_step;
using detail::store_tile;

// 16 elements of a key row from element c (n < 16: the first n, zeros after;
// Q8_0 rows have no tails: hd is a multiple of 32).
template <DType T>
MOELSP_AVX512_INLINE __m512 load_k(const uint8_t* k, int64_t c, __mmask16 mask) {
  if constexpr (T == DType::F32) {
    return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(k) + c);
  } else if constexpr (T == DType::Q8_0) {
    const uint8_t* b = k + size_t(c / 32) * sizeof(blocks::Q8_0);
    uint16_t dh;
    std::memcpy(&dh, b, 2);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(dh));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + c % 32));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, reinterpret_cast<const uint16_t*>(k) + c);
    if constexpr (T == DType::F16) return _mm512_cvtph_ps(h);
    else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// One 16-element step of a tile: M rows' elements c … c + 15 against N keys'.
template <DType T, int M, int N>
MOELSP_AVX512_INLINE void step(const float* const qr[M], const uint8_t* const kr[N], int64_t c, __mmask16 mask,
                               __m512 acc[16]) {
  __m512 q[M];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) q[i] = _mm512_maskz_loadu_ps(mask, qr[i] + c);
#pragma GCC unroll 4
  for (int j = 0; j < N; ++j) {
    const __m512 k = load_k<T>(kr[j], c, mask);
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) acc[i * 4 + j] = _mm512_fmadd_ps(q[i], k, acc[i * 4 + j]);
  }
}

// Rows i0 … i0 + M − 1 against keys j0 … j0 + N − 1 (M, N ≤ 4).
template <DType T, int M, int N>
MOELSP_AVX512 void tile(const ScoresArgs& a, int64_t i0, int64_t j0, Spread& sp) {
  const auto* kb = static_cast<const uint8_t*>(a.k) + size_t(j0) * a.k_stride;
  const float* qr[M];
  const uint8_t* kr[N];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) qr[i] = a.q + (i0 + i) * a.ldq;
#pragma GCC unroll 4
  for (int j = 0; j < N; ++j) kr[j] = kb + size_t(j) * a.k_stride;
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t full = a.hd / 16 * 16;
  const uint8_t* pf = sp.p;
  int64_t left = sp.left;
  for (int64_t c = 0; c < full; c += 16) {
    spread_step(pf, left, sp.per);
    step<T, M, N>(qr, kr, c, __mmask16(0xffff), acc);
  }
  sp.p = pf, sp.left = left;
  if (full < a.hd) step<T, M, N>(qr, kr, full, __mmask16((1u << (a.hd - full)) - 1), acc);
  store_tile<M, N>(acc, a.s + i0 * a.lds + j0, a.lds);
}

template <DType T, int M>
void row_tiles(const ScoresArgs& a, int64_t i0, Spread& sp) {
  int64_t j = 0;
  for (; j + 4 <= a.n; j += 4) tile<T, M, 4>(a, i0, j, sp);
  switch (a.n - j) {
    case 3: tile<T, M, 3>(a, i0, j, sp); break;
    case 2: tile<T, M, 2>(a, i0, j, sp); break;
    case 1: tile<T, M, 1>(a, i0, j, sp); break;
    default: break;
  }
}

template <DType T>
void scores_avx512(const ScoresArgs& a) {
  // a.ahead over the tiles' 16-element steps
  const int64_t steps = (a.m + 3) / 4 * ((a.n + 3) / 4) * std::max<int64_t>(1, a.hd / 16);
  Spread sp = detail::spread(a.ahead, steps);
  int64_t i = 0;
  for (; i + 4 <= a.m; i += 4) row_tiles<T, 4>(a, i, sp);
  switch (a.m - i) {
    case 3: row_tiles<T, 3>(a, i, sp); break;
    case 2: row_tiles<T, 2>(a, i, sp); break;
    case 1: row_tiles<T, 1>(a, i, sp); break;
    default: break;
  }
  prefetch_lines({sp.p, sp.left});  // (none left: the steps cover them)
}

// Below AVX-512: matmul's tiles (F16 and BF16 rows widened in registers);
// Q8_0 rows widened into a buffer first (matmul would meet them with int8
// queries, which attention must not: engine/layers/attention.cpp).
void scores_matmul(const ScoresArgs& a) {
  MatmulArgs m{.w = {.data = a.k, .type = a.k_type, .cols = a.hd, .rows = a.n, .row_bytes = a.k_stride},
               .x = a.q,
               .ldx = a.ldq,
               .m = a.m,
               .y = a.s,
               .ldy = a.lds,
               .row_begin = 0,
               .row_end = a.n};
  thread_local std::vector<float> wide;
  if (a.k_type == DType::Q8_0) {
    wide.resize(size_t(a.n) * size_t(a.hd));
    for (int64_t j = 0; j < a.n; ++j)
      dequantize_row(DType::Q8_0, static_cast<const uint8_t*>(a.k) + size_t(j) * a.k_stride,
                     wide.data() + size_t(j) * size_t(a.hd), a.hd);
    m.w = {.data = wide.data(), .type = DType::F32, .cols = a.hd, .rows = a.n, .row_bytes = size_t(a.hd) * 4};
  }
  matmul(m);
}

}  // namespace

void prefetch_lines(const LinesAhead& a) {
  for (int64_t i = 0; i < a.lines; ++i) __builtin_prefetch(a.p + i * 64);
}

int64_t bf16_row_stride(int64_t n) { return (n + 31) / 32 * 32; }

// vcvtne2ps2bf16 where the kernels that read the rows run; the same rounding in
// scalar code elsewhere (it differs from the instruction only on subnormals,
// which the instruction flushes to zero).
void round_rows_bf16(const float* x, int64_t rows, int64_t ldx, int64_t n, uint16_t* out) {
  if (kernel_config().isa >= Isa::Avx512Bf16) return detail::round_rows_bf16(x, rows, ldx, n, out);
  const int64_t pad = bf16_row_stride(n);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < pad; ++c) out[i * pad + c] = c < n ? fp32_to_bf16(x[i * ldx + c]) : 0;
}

void scores(const ScoresArgs& a) {
  if (a.m <= 0 || a.n <= 0) return prefetch_lines(a.ahead);
  const Isa isa = kernel_config().isa;
  if (isa >= Isa::Avx512Bf16 && a.k_type == DType::BF16) return detail::scores_bf16(a);
  if (isa >= Isa::Avx512Vnni) {
    switch (a.k_type) {
      case DType::F32: return scores_avx512<DType::F32>(a);
      case DType::F16: return scores_avx512<DType::F16>(a);
      case DType::BF16: return scores_avx512<DType::BF16>(a);
      case DType::Q8_0: return scores_avx512<DType::Q8_0>(a);
      default: break;
    }
  }
  prefetch_lines(a.ahead);
  scores_matmul(a);
}

}  // namespace moelsp::kernels
