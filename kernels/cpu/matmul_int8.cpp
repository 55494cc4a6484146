// Q8_0 weights × int8 activations (AVX2). Performance model: a 32-value block
// is one 32-byte load of weights and one of activations, two sign ops, one
// maddubs (u8·s8 pairs → s16), one madd (→ s32), a convert and an FMA with the
// two scales: ~8 instructions per 32 MACs, where the f32 path spends ~4 FMAs
// plus the expansion of the weights. Rows go four at a time against each
// input so the activation block is loaded once per four rows.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/convert.h"
#include "kernels/matmul.h"
#include "matmul_int8.h"

namespace moelsp::kernels {
namespace {

std::atomic<Activations> g_activations{Activations::Int8};

__attribute__((target("avx2,fma"))) void quantize_row_q8_avx2(const float* x, BlockQ8* out, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* p = x + b * 32;
    __m256 v[4], mx = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(p + 8 * k);
      mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    out[b].d = d;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      // Round half away from zero exactly as the reference: trunc(s + copysign(0.5, s)) in f32.
      const __m256 s = _mm256_mul_ps(v[k], vid);
      const __m256 half = _mm256_or_ps(_mm256_and_ps(s, sign), _mm256_set1_ps(0.5f));
      q[k] = _mm256_cvttps_epi32(_mm256_add_ps(s, half));
    }
    // 4×8 int32 → 32 int8 in order: packs interleave 128-bit lanes, a permute restores the order.
    const __m256i a = _mm256_packs_epi32(q[0], q[1]), c = _mm256_packs_epi32(q[2], q[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, c), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), bytes);
  }
}

__attribute__((target("avx2,fma"))) inline __m256 block_dot(const uint8_t* w, const BlockQ8& x) {
  const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2));
  const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q));
  // maddubs wants unsigned × signed: |x| × (w with x's sign). Q8_0 weights are in [-127, 127].
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qw, qx));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

__attribute__((target("avx2,fma,f16c"))) inline float hsum(__m256 v) {
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_shuffle_ps(t, t, 1));
  return _mm_cvtss_f32(t);
}

__attribute__((target("avx2,fma,f16c"))) inline float scale_of(const uint8_t* w) {
  uint16_t dh;
  std::memcpy(&dh, w, 2);
  return _cvtsh_ss(dh);
}

// Four weight rows (row_bytes apart) against one quantized input.
__attribute__((target("avx2,fma,f16c"))) void dot_q8_0_4x1(const uint8_t* w, size_t row_bytes, const BlockQ8* x,
                                                            int64_t nb, float out[4]) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < nb; ++b) {
    const __m256 dx = _mm256_set1_ps(x[b].d);
    for (int k = 0; k < 4; ++k) {
      const uint8_t* blk = w + size_t(k) * row_bytes + size_t(b) * 34;
      acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(scale_of(blk)), dx), block_dot(blk, x[b]), acc[k]);
    }
  }
  for (int k = 0; k < 4; ++k) out[k] = hsum(acc[k]);
}

__attribute__((target("avx2,fma,f16c"))) float dot_q8_0_1x1(const uint8_t* w, const BlockQ8* x, int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, w += 34)
    acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(scale_of(w)), _mm256_set1_ps(x[b].d)), block_dot(w, x[b]), acc);
  return hsum(acc);
}

thread_local std::vector<BlockQ8> tls_xq;

}  // namespace

void set_activations(Activations a) { g_activations = a; }
Activations activations() { return g_activations; }

bool int8_path_available(const MatmulArgs& a) {
  return a.w.type == DType::Q8_0 && g_activations.load(std::memory_order_relaxed) == Activations::Int8 &&
         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

void matmul_q8_0_int8(const MatmulArgs& a) {
  constexpr int64_t kChunkM = 64;
  const int64_t nb = a.w.cols / 32;
  for (int64_t i0 = 0; i0 < a.m; i0 += kChunkM) {
    const int64_t i1 = std::min(a.m, i0 + kChunkM);
    if (tls_xq.size() < size_t((i1 - i0) * nb)) tls_xq.resize(size_t((i1 - i0) * nb));
    for (int64_t i = i0; i < i1; ++i) quantize_row_q8_avx2(a.x + i * a.ldx, tls_xq.data() + (i - i0) * nb, a.w.cols);
    int64_t r = a.row_begin;
    for (; r + 4 <= a.row_end; r += 4) {
      for (int64_t i = i0; i < i1; ++i) {
        float o[4];
        dot_q8_0_4x1(a.w.row(r), a.w.row_bytes, tls_xq.data() + (i - i0) * nb, nb, o);
        for (int k = 0; k < 4; ++k) a.y[i * a.ldy + r + k] = o[k];
      }
    }
    for (; r < a.row_end; ++r)
      for (int64_t i = i0; i < i1; ++i) a.y[i * a.ldy + r] = dot_q8_0_1x1(a.w.row(r), tls_xq.data() + (i - i0) * nb, nb);
  }
}

}  // namespace moelsp::kernels
