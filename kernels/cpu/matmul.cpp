// CPU matmul. Performance model: decode (m = 1) streams every weight byte once,
// so it is bound by memory bandwidth; quantized rows are expanded to f32 four
// at a time into a thread-local buffer that stays in L1, then dotted with the
// m inputs two at a time (a 4×2 register tile: 6 loads feed 8 FMAs, where one
// row against one input needs 2 loads per FMA). Prefill walks the inputs in
// chunks of kChunkM rows so a chunk stays in L2 while every weight row of the
// thread's range passes over it; each row is then expanded once per chunk.
// Weight types with an int8 kernel (matmul_int8.cpp: every quantized type)
// go there instead unless activations are set to F32; this path serves F16,
// BF16 and F32, and the quantized types with F32 activations.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../quant_blocks.h"
#include "kernels/convert.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "matmul_int8.h"
#include "simd.h"

namespace moelsp::kernels {
namespace {

float dot_scalar(const float* a, const float* b, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

using simd::hsum;

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float r = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

__attribute__((target("avx2,fma"))) void axpy_avx2(float s, const float* x, float* y, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vs, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += s * x[i];
}

// The columns past the last 8-wide step, for every tile below: one explicit
// fused multiply-add per column, so a tile's sum does not depend on how the
// compiler contracted or vectorised its own tail loop.
inline float add_tail(float s, const float* w, const float* x, int64_t c, int64_t n) {
  for (; c < n; ++c) s = std::fma(w[c], x[c], s);
  return s;
}

// The 4×2 tile: y[j][i] = w_j · x_i for four weight rows and two inputs.
__attribute__((target("avx2,fma"))) void dot_4x2_avx2(const float* w, int64_t ldw, const float* x0, const float* x1,
                                                      int64_t n, float out[4][2]) {
  __m256 a00 = _mm256_setzero_ps(), a01 = _mm256_setzero_ps(), a10 = _mm256_setzero_ps(), a11 = _mm256_setzero_ps();
  __m256 a20 = _mm256_setzero_ps(), a21 = _mm256_setzero_ps(), a30 = _mm256_setzero_ps(), a31 = _mm256_setzero_ps();
  const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const __m256 v0 = _mm256_loadu_ps(x0 + c), v1 = _mm256_loadu_ps(x1 + c);
    __m256 k = _mm256_loadu_ps(w0 + c);
    a00 = _mm256_fmadd_ps(k, v0, a00), a01 = _mm256_fmadd_ps(k, v1, a01);
    k = _mm256_loadu_ps(w1 + c);
    a10 = _mm256_fmadd_ps(k, v0, a10), a11 = _mm256_fmadd_ps(k, v1, a11);
    k = _mm256_loadu_ps(w2 + c);
    a20 = _mm256_fmadd_ps(k, v0, a20), a21 = _mm256_fmadd_ps(k, v1, a21);
    k = _mm256_loadu_ps(w3 + c);
    a30 = _mm256_fmadd_ps(k, v0, a30), a31 = _mm256_fmadd_ps(k, v1, a31);
  }
  const __m256 acc[8] = {a00, a01, a10, a11, a20, a21, a30, a31};
  const float* rows[4] = {w0, w1, w2, w3};
  const float* xs[2] = {x0, x1};
  for (int k = 0; k < 8; ++k) out[k / 2][k % 2] = add_tail(hsum(acc[k]), rows[k / 2], xs[k % 2], c, n);
}

// The 4×4 tile, where AVX-512 VL gives 32 registers for its 16 accumulators:
// 8 loads feed 16 FMAs, and twice the independent chains hide the FMA latency
// (the 4×2 tile's 8 chains just cover it). Measured on 64 × 576 with 16
// inputs (MLA's absorbed scores, 16 heads): 23 → see docs/benchmarks.md.
// Each pair's sum is in the other tiles' order of operations.
__attribute__((target("avx512f,avx512vl,avx2,fma"))) void dot_4x4_wide(const float* w, int64_t ldw, const float* x,
                                                                       int64_t ldx, int64_t n, float out[4][4]) {
  __m256 acc[4][4];
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < 4; ++i) acc[r][i] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + i * ldx + c);
    for (int r = 0; r < 4; ++r) {
      const __m256 k = _mm256_loadu_ps(w + r * ldw + c);
      for (int i = 0; i < 4; ++i) acc[r][i] = _mm256_fmadd_ps(k, v[i], acc[r][i]);
    }
  }
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < 4; ++i) out[r][i] = add_tail(hsum(acc[r][i]), w + r * ldw, x + i * ldx, c, n);
}

// Four rows against one input (decode): four independent FMA chains, each in
// the tile's order of operations.
__attribute__((target("avx2,fma"))) void dot_4x1_avx2(const float* w, int64_t ldw, const float* x, int64_t n,
                                                      float out[4]) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const __m256 v = _mm256_loadu_ps(x + c);
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + c), v, a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + c), v, a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + c), v, a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + c), v, a3);
  }
  const __m256 acc[4] = {a0, a1, a2, a3};
  const float* rows[4] = {w0, w1, w2, w3};
  for (int k = 0; k < 4; ++k) out[k] = add_tail(hsum(acc[k]), rows[k], x, c, n);
}

// One row against one input with the tile's exact order of operations (one
// accumulator, the same reduction), so a value does not depend on whether it
// was computed in a tile or in the tail: results are the same however the
// rows are split across threads.
__attribute__((target("avx2,fma"))) float dot_1x1_avx2(const float* w, const float* x, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + c), _mm256_loadu_ps(x + c), acc);
  return add_tail(hsum(acc), w, x, c, n);
}

void axpy_scalar(float s, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += s * x[i];
}

// F16 and BF16 rows read straight into the FMA chains at one input (decode):
// expanding four rows into an f32 buffer first and reading it back cost two
// extra passes over L2 (measured on 8192 × 4096: F16 8.6 weight GB/s per
// thread that way; BF16, with no vector expansion at all, 1.1). The order of
// operations is dot_4x1_avx2's and dot_1x1_avx2's (the conversions are exact),
// so the values are the same bit for bit.
template <bool kBf16>
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8_half(const uint16_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kBf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  else return _mm256_cvtph_ps(v);
}
template <bool kBf16>
inline float half_value(uint16_t h) {
  return kBf16 ? bf16_to_fp32(h) : fp16_to_fp32(h);
}
template <bool kBf16>
__attribute__((target("avx2,fma,f16c"))) void dot_4x1_half(const uint16_t* const rows[4], const uint16_t* const next[4],
                                                           const float* x, int64_t n, float out[4]) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    if (next && c % 32 == 0)  // the next four rows' line at this column
      for (int k = 0; k < 4; ++k) _mm_prefetch(reinterpret_cast<const char*>(next[k] + c), _MM_HINT_T0);
    const __m256 v = _mm256_loadu_ps(x + c);
    a0 = _mm256_fmadd_ps(load8_half<kBf16>(rows[0] + c), v, a0);
    a1 = _mm256_fmadd_ps(load8_half<kBf16>(rows[1] + c), v, a1);
    a2 = _mm256_fmadd_ps(load8_half<kBf16>(rows[2] + c), v, a2);
    a3 = _mm256_fmadd_ps(load8_half<kBf16>(rows[3] + c), v, a3);
  }
  const __m256 acc[4] = {a0, a1, a2, a3};
  for (int k = 0; k < 4; ++k) {
    float r = hsum(acc[k]);
    for (int64_t cc = c; cc < n; ++cc) r += half_value<kBf16>(rows[k][cc]) * x[cc];
    out[k] = r;
  }
}
// Four F16/BF16 rows (ldw elements apart) against M ≤ 4 inputs, the rows
// widened in registers: dot_4x4_wide's tile and order of operations (so the
// values are the F32 path's bit for bit), without expanding each group of
// four rows into a buffer first. Attention's scores read the KV cache's F16
// keys this way, in place.
template <bool kBf16, int M>
__attribute__((target("avx512f,avx512vl,avx2,fma,f16c"))) void dot_4xm_half(const uint16_t* w, int64_t ldw,
                                                                            const float* x, int64_t ldx, int64_t n,
                                                                            float out[4][4]) {
  __m256 acc[4][M];
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < M; ++i) acc[r][i] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    __m256 v[M];
    for (int i = 0; i < M; ++i) v[i] = _mm256_loadu_ps(x + i * ldx + c);
    for (int r = 0; r < 4; ++r) {
      const __m256 k = load8_half<kBf16>(w + r * ldw + c);
      for (int i = 0; i < M; ++i) acc[r][i] = _mm256_fmadd_ps(k, v[i], acc[r][i]);
    }
  }
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < M; ++i) {
      float s = hsum(acc[r][i]);
      for (int64_t cc = c; cc < n; ++cc) s = std::fma(half_value<kBf16>(w[r * ldw + cc]), x[i * ldx + cc], s);
      out[r][i] = s;
    }
}

template <bool kBf16>
__attribute__((target("avx2,fma,f16c"))) float dot_1x1_half(const uint16_t* w, const float* x, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) acc = _mm256_fmadd_ps(load8_half<kBf16>(w + c), _mm256_loadu_ps(x + c), acc);
  float r = hsum(acc);
  for (; c < n; ++c) r += half_value<kBf16>(w[c]) * x[c];
  return r;
}
// Each group of four rows requests the next group's lines as it goes: short
// matrices (a MoE router, 64 × 1024 F16, is 131 KB in 8-row chunks) are read
// as four 2 KB streams at a time, too short for the hardware prefetcher to
// ramp up, so they ran at memory latency (~12 GB/s cold against ~30 hot).
template <bool kBf16>
void matmul_half_1(const MatmulArgs& a) {
  const auto row = [&](int64_t r) { return reinterpret_cast<const uint16_t*>(a.w.row(r)); };
  int64_t r = a.row_begin;
  for (; r + 4 <= a.row_end; r += 4) {
    const uint16_t* const rows[4] = {row(r), row(r + 1), row(r + 2), row(r + 3)};
    const uint16_t* const ahead[4] = {row(r + 4), row(r + 5), row(r + 6), row(r + 7)};
    float o[4];
    dot_4x1_half<kBf16>(rows, r + 8 <= a.row_end ? ahead : nullptr, a.x, a.w.cols, o);
    for (int k = 0; k < 4; ++k) a.y[r + k] = o[k];
  }
  for (; r < a.row_end; ++r) a.y[r] = dot_1x1_half<kBf16>(row(r), a.x, a.w.cols);
}

template <bool kBf16>
void matmul_half_tiles(const MatmulArgs& a) {
  const int64_t n = a.w.cols, ldw = int64_t(a.w.row_bytes / sizeof(uint16_t));
  int64_t r = a.row_begin;
  float o[4][4];
  for (; r + 4 <= a.row_end; r += 4) {
    const auto* w = reinterpret_cast<const uint16_t*>(a.w.row(r));
    int64_t i = 0;
    const auto put = [&](int mi) {
      for (int k = 0; k < 4; ++k)
        for (int q = 0; q < mi; ++q) a.y[(i + q) * a.ldy + r + k] = o[k][q];
    };
    for (; i + 4 <= a.m; i += 4) dot_4xm_half<kBf16, 4>(w, ldw, a.x + i * a.ldx, a.ldx, n, o), put(4);
    switch (a.m - i) {
      case 3: dot_4xm_half<kBf16, 3>(w, ldw, a.x + i * a.ldx, a.ldx, n, o), put(3); break;
      case 2: dot_4xm_half<kBf16, 2>(w, ldw, a.x + i * a.ldx, a.ldx, n, o), put(2); break;
      case 1: dot_4xm_half<kBf16, 1>(w, ldw, a.x + i * a.ldx, a.ldx, n, o), put(1); break;
      default: break;
    }
  }
  for (; r < a.row_end; ++r) {  // the rows past the last tile, each (row, input) summed as the tile sums it
    const auto* w = reinterpret_cast<const uint16_t*>(a.w.row(r));
    for (int64_t i = 0; i < a.m; ++i) {
      dot_4xm_half<kBf16, 1>(w, 0, a.x + i * a.ldx, a.ldx, n, o);  // (the same row four times)
      a.y[i * a.ldy + r] = o[0][0];
    }
  }
}

__attribute__((target("avx2,f16c"))) void f16_row_avx2(const uint16_t* h, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  for (; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}

__attribute__((target("avx2"))) void q8_0_row_avx2(const uint8_t* b, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 32, b += sizeof(blocks::Q8_0)) {
    uint16_t dh;
    std::memcpy(&dh, b, 2);
    const __m256 d = _mm256_set1_ps(fp16_to_fp32(dh));
    for (int j = 0; j < 32; j += 8) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + j));
      const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
      _mm256_storeu_ps(dst + i + j, _mm256_mul_ps(d, q));
    }
  }
}

using blocks::half_at;

// The K-quant expansions below compute exactly what kernels/ref does, in the
// same operation order (no FMA), so the results are bit-identical.
__attribute__((target("avx2"))) void q4_k_row_avx2(const uint8_t* b, float* dst, int64_t n) {
  const __m256i nib = _mm256_set1_epi32(0x0f);
  for (int64_t i = 0; i < n; i += 256, b += sizeof(blocks::Q4_K)) {
    const float d = half_at(b), dmin = half_at(b + 2);
    const uint8_t* sc = b + 4;
    for (int pair = 0; pair < 4; ++pair) {
      float dd[2], mm[2];
      for (int k = 0; k < 2; ++k) {
        const int sub = 2 * pair + k;
        int scale, min;
        blocks::k4_scale_min(sc, sub, &scale, &min);
        dd[k] = d * float(scale);
        mm[k] = dmin * float(min);
      }
      const __m256 d1 = _mm256_set1_ps(dd[0]), m1 = _mm256_set1_ps(mm[0]);
      const __m256 d2 = _mm256_set1_ps(dd[1]), m2 = _mm256_set1_ps(mm[1]);
      const uint8_t* q = b + 16 + 32 * pair;
      float* y = dst + i + 64 * pair;
      for (int g = 0; g < 32; g += 8) {
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + g)));
        const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, nib));
        const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
        _mm256_storeu_ps(y + g, _mm256_sub_ps(_mm256_mul_ps(d1, lo), m1));
        _mm256_storeu_ps(y + 32 + g, _mm256_sub_ps(_mm256_mul_ps(d2, hi), m2));
      }
    }
  }
}

__attribute__((target("avx2"))) inline __m256i load_u8x8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

__attribute__((target("avx2"))) void q6_k_row_avx2(const uint8_t* b, float* dst, int64_t n) {
  const __m256i nib = _mm256_set1_epi32(0x0f), two = _mm256_set1_epi32(3), off = _mm256_set1_epi32(32);
  for (int64_t i = 0; i < n; i += 256, b += sizeof(blocks::Q6_K)) {
    const float d = half_at(b + offsetof(blocks::Q6_K, d));
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b + 64 * half;
      const uint8_t* qh = b + 128 + 32 * half;
      const int8_t* s = scales + 8 * half;
      float* y = dst + i + 128 * half;
      for (int l = 0; l < 32; l += 8) {
        const int is = l / 16;
        const __m256i a = load_u8x8(ql + l), c = load_u8x8(ql + l + 32), h = load_u8x8(qh + l);
        const __m256i q1 = _mm256_sub_epi32(
            _mm256_or_si256(_mm256_and_si256(a, nib), _mm256_slli_epi32(_mm256_and_si256(h, two), 4)), off);
        const __m256i q2 =
            _mm256_sub_epi32(_mm256_or_si256(_mm256_and_si256(c, nib),
                                             _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2), two), 4)),
                             off);
        const __m256i q3 =
            _mm256_sub_epi32(_mm256_or_si256(_mm256_srli_epi32(a, 4),
                                             _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 4), two), 4)),
                             off);
        const __m256i q4 =
            _mm256_sub_epi32(_mm256_or_si256(_mm256_srli_epi32(c, 4),
                                             _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 6), two), 4)),
                             off);
        _mm256_storeu_ps(y + l, _mm256_mul_ps(_mm256_set1_ps(d * float(s[is])), _mm256_cvtepi32_ps(q1)));
        _mm256_storeu_ps(y + l + 32, _mm256_mul_ps(_mm256_set1_ps(d * float(s[is + 2])), _mm256_cvtepi32_ps(q2)));
        _mm256_storeu_ps(y + l + 64, _mm256_mul_ps(_mm256_set1_ps(d * float(s[is + 4])), _mm256_cvtepi32_ps(q3)));
        _mm256_storeu_ps(y + l + 96, _mm256_mul_ps(_mm256_set1_ps(d * float(s[is + 6])), _mm256_cvtepi32_ps(q4)));
      }
    }
  }
}

// MXFP4: each code's value (a byte shuffle through the table) times the block's
// power of two, the reference's one f32 multiply: bit-identical.
__attribute__((target("avx2"))) void mxfp4_row_avx2(const uint8_t* b, float* dst, int64_t n) {
  const __m128i tbl = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks::kMxfp4Values));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  for (int64_t i = 0; i < n; i += 32, b += sizeof(blocks::MXFP4)) {
    const __m256 d = _mm256_set1_ps(blocks::e8m0_half(b[offsetof(blocks::MXFP4, e)]));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(blocks::MXFP4, qs)));
    const __m128i v[2] = {_mm_shuffle_epi8(tbl, _mm_and_si128(q, m4)),
                          _mm_shuffle_epi8(tbl, _mm_and_si128(_mm_srli_epi16(q, 4), m4))};
    for (int h = 0; h < 2; ++h) {
      _mm256_storeu_ps(dst + i + 16 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v[h])), d));
      _mm256_storeu_ps(dst + i + 16 * h + 8,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v[h], 8))), d));
    }
  }
}

// Returns a pointer to row r as f32: the row itself for F32 weights, else
// `buf` filled with the dequantized row. `avx2`: the level is at least Avx2
// (which includes FMA and F16C, kernels/isa.h).
const float* row_f32(const MatView& w, int64_t r, float* buf, bool avx2) {
  const uint8_t* src = w.row(r);
  switch (w.type) {
    case DType::F32: return reinterpret_cast<const float*>(src);
    case DType::F16:
      if (avx2) f16_row_avx2(reinterpret_cast<const uint16_t*>(src), buf, w.cols);
      else ref::dequantize_row(w.type, src, buf, w.cols);
      return buf;
    case DType::Q8_0:
      if (avx2) q8_0_row_avx2(src, buf, w.cols);
      else ref::dequantize_row(w.type, src, buf, w.cols);
      return buf;
    case DType::Q4_K:
      if (avx2) q4_k_row_avx2(src, buf, w.cols);
      else ref::dequantize_row(w.type, src, buf, w.cols);
      return buf;
    case DType::Q6_K:
      if (avx2) q6_k_row_avx2(src, buf, w.cols);
      else ref::dequantize_row(w.type, src, buf, w.cols);
      return buf;
    case DType::MXFP4:
      if (avx2) mxfp4_row_avx2(src, buf, w.cols);
      else ref::dequantize_row(w.type, src, buf, w.cols);
      return buf;
    default: ref::dequantize_row(w.type, src, buf, w.cols); return buf;
  }
}

thread_local std::vector<float> tls_row;

}  // namespace

bool matmul_supports(DType t) { return traits(t).kernel != Kernel::None; }

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  MatView w{src, t, n, 1, 0};
  const float* r = row_f32(w, 0, dst, kernel_config().isa >= Isa::Avx2);
  if (r != dst) std::memcpy(dst, r, size_t(n) * sizeof(float));
}

float dot_f32(const float* a, const float* b, int64_t n) {
  return kernel_config().isa >= Isa::Avx2 ? dot_avx2(a, b, n) : dot_scalar(a, b, n);
}

void matmul(const MatmulArgs& a) { matmul_with(a, kernel_config()); }  // read once: the whole call uses one setting

void matmul_with(const MatmulArgs& a, const KernelConfig& cfg) {
  if (a.w.row_group > 1) return matmul_repacked(a, cfg);
  if (int8_path_available(a, cfg)) return matmul_int8(a, cfg.isa);
  constexpr int64_t kTile = 4, kChunkM = 64;
  const int64_t n = a.w.cols;
  const bool use_avx2 = cfg.isa >= Isa::Avx2, wide = cfg.isa >= Isa::Avx512Vnni;
  if (!use_avx2) {
    if (tls_row.size() < size_t(n)) tls_row.resize(size_t(n));
    for (int64_t r = a.row_begin; r < a.row_end; ++r) {
      const float* w = row_f32(a.w, r, tls_row.data(), use_avx2);
      for (int64_t i = 0; i < a.m; ++i) a.y[i * a.ldy + r] = dot_scalar(w, a.x + i * a.ldx, n);
    }
    return;
  }
  if (a.m == 1 && a.w.type == DType::F16) return matmul_half_1<false>(a);
  if (a.m == 1 && a.w.type == DType::BF16) return matmul_half_1<true>(a);
  // A few inputs (attention's query rows of one kv head): rows widened in
  // registers. Many (a prompt on F16 weights): each group of four rows
  // widened once into buf below, for every input.
  if (wide && a.m <= kChunkM && a.w.type == DType::F16) return matmul_half_tiles<false>(a);
  if (wide && a.m <= kChunkM && a.w.type == DType::BF16) return matmul_half_tiles<true>(a);
  if (tls_row.size() < size_t(kTile * n)) tls_row.resize(size_t(kTile * n));
  float* buf = tls_row.data();
  for (int64_t i0 = 0; i0 < a.m; i0 += kChunkM) {
    const int64_t i1 = std::min(a.m, i0 + kChunkM);
    int64_t r = a.row_begin;
    for (; r + kTile <= a.row_end; r += kTile) {
      // Four rows as f32, ldw apart: F32 rows in place (attention's keys are
      // rows of a wider cache row, read where they are), others expanded into buf.
      const float* w;
      int64_t ldw = n;
      if (a.w.type == DType::F32 && a.w.row_bytes % sizeof(float) == 0) {
        w = reinterpret_cast<const float*>(a.w.row(r));
        ldw = int64_t(a.w.row_bytes / sizeof(float));
      } else {
        for (int64_t k = 0; k < kTile; ++k) {
          const float* src = row_f32(a.w, r + k, buf + k * n, use_avx2);
          if (src != buf + k * n) std::memcpy(buf + k * n, src, size_t(n) * sizeof(float));
        }
        w = buf;
      }
      int64_t i = i0;
      if (wide)
        for (; i + 4 <= i1; i += 4) {
          float o44[4][4];
          dot_4x4_wide(w, ldw, a.x + i * a.ldx, a.ldx, n, o44);
          for (int64_t k = 0; k < kTile; ++k)
            for (int64_t q = 0; q < 4; ++q) a.y[(i + q) * a.ldy + r + k] = o44[k][q];
        }
      float out[4][2];
      for (; i + 2 <= i1; i += 2) {
        dot_4x2_avx2(w, ldw, a.x + i * a.ldx, a.x + (i + 1) * a.ldx, n, out);
        for (int64_t k = 0; k < kTile; ++k)
          a.y[i * a.ldy + r + k] = out[k][0], a.y[(i + 1) * a.ldy + r + k] = out[k][1];
      }
      for (; i < i1; ++i) {
        float o4[4];
        dot_4x1_avx2(w, ldw, a.x + i * a.ldx, n, o4);
        for (int64_t k = 0; k < kTile; ++k) a.y[i * a.ldy + r + k] = o4[k];
      }
    }
    for (; r < a.row_end; ++r) {
      const float* w = row_f32(a.w, r, buf, use_avx2);
      for (int64_t i = i0; i < i1; ++i) a.y[i * a.ldy + r] = dot_1x1_avx2(w, a.x + i * a.ldx, n);
    }
  }
}

void matmul_t_accumulate(const MatView& w, const float* s, float* y, int64_t row_begin, int64_t row_end) {
  if (tls_row.size() < size_t(w.cols)) tls_row.resize(size_t(w.cols));
  const bool use_avx2 = kernel_config().isa >= Isa::Avx2;  // read once
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* wr = row_f32(w, r, tls_row.data(), use_avx2);
    if (use_avx2) axpy_avx2(s[r], wr, y, w.cols);
    else axpy_scalar(s[r], wr, y, w.cols);
  }
}

}  // namespace moelsp::kernels
