// Exponential-based pieces, vectorized: attention's softmax (the scores
// scaled with their max found, e^(s − max) with its sum) and SwiGLU's
// silu(g)·u.
//
// Performance model: at decode every (query head, key) pair costs ~128
// multiply-adds for its score and ~128 for P·V, which the f32 kernels do at
// 16-32 a cycle, and one exponential, which glibc's scalar expf does in ~15-20
// cycles: the exponentials were about a third of attention's arithmetic. Here
// an exponential is ~10 vector instructions for 16 (AVX-512) or 8 (AVX2)
// values. e^x = 2^n · e^r with n = round(x·log2 e) and r = x − n·ln 2 (in two
// parts, so r is exact to f32), e^r by Cephes's degree-6 polynomial for expf
// (relative error below 2e-7 on |r| ≤ ln2/2); x below −87.3 (past f32's
// normal range) gives 0.
// GCC 12's 512-bit intrinsics start from _mm512_undefined_*, which it then
// reports as used uninitialized (GCC bug 105593): a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>

#include "kernels/isa.h"
#include "kernels/matmul.h"

namespace moelsp::kernels {
namespace {

constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kMinX = -87.33654f;  // e^kMinX is f32's smallest normal
constexpr float kMaxX = 88.0f;       // e^kMaxX is below f32's largest
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f, kP3 = 4.1665795894e-2f,
                kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

#define SM_AVX512 __attribute__((target("avx512f,fma")))
#define SM_AVX2 __attribute__((target("avx2,fma")))

SM_AVX512 __m512 exp512(__m512 x) {
  const __mmask16 low = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kMinX), _CMP_LT_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(kMinX));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(__mmask16(~low), _mm512_scalef_ps(y, n));
}

SM_AVX2 __m256 exp256(__m256 x) {
  const __m256 low = _mm256_cmp_ps(x, _mm256_set1_ps(kMinX), _CMP_LT_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(kMinX));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
  // 2^n as an f32 bit pattern: n ≥ −126 here, so (n + 127) << 23 is a normal number.
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(low, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

SM_AVX512 float scale_max_avx512(float* p, int64_t n, float scale, float init) {
  __m512 mx = _mm512_set1_ps(init);
  const __m512 s = _mm512_set1_ps(scale);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(p + j), s);
    _mm512_storeu_ps(p + j, v);
    mx = _mm512_max_ps(mx, v);
  }
  if (j < n) {
    const __mmask16 k = __mmask16((1u << (n - j)) - 1);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + j), s);
    _mm512_mask_storeu_ps(p + j, k, v);
    mx = _mm512_mask_max_ps(mx, k, mx, v);
  }
  return _mm512_reduce_max_ps(mx);
}

SM_AVX512 float exp_shift_sum_avx512(float* p, int64_t n, float shift) {
  __m512 sum = _mm512_setzero_ps();
  const __m512 s = _mm512_set1_ps(shift);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(p + j), s));
    _mm512_storeu_ps(p + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (j < n) {
    const __mmask16 k = __mmask16((1u << (n - j)) - 1);
    const __m512 e = _mm512_maskz_mov_ps(k, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p + j), s)));
    _mm512_mask_storeu_ps(p + j, k, e);
    sum = _mm512_add_ps(sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

// silu(g)·u = g / (1 + e^−g) · u. −g is capped at kMaxX (e^88 is still a
// finite f32, and exp256's 2^n bit pattern stays a normal number): for
// g < −88 that gives g / 1.6e38 (under 1e-35 for any sane g) where std::exp's
// inf gives −0; −g below kMinX gives e = 0 and so g·u.
SM_AVX512 void silu_mul_avx512(const float* g, const float* u, float* h, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 gv = _mm512_loadu_ps(g + j);
    const __m512 e = exp512(_mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), gv), _mm512_set1_ps(kMaxX)));
    _mm512_storeu_ps(h + j, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), _mm512_loadu_ps(u + j)));
  }
  if (j < n) {
    const __mmask16 k = __mmask16((1u << (n - j)) - 1);
    const __m512 gv = _mm512_maskz_loadu_ps(k, g + j);
    const __m512 e = exp512(_mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), gv), _mm512_set1_ps(kMaxX)));
    _mm512_mask_storeu_ps(h + j, k,
                          _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), _mm512_maskz_loadu_ps(k, u + j)));
  }
}

SM_AVX2 float hmax256(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

SM_AVX2 float hsum256(__m256 v) {
  __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_add_ps(m, _mm_movehl_ps(m, m));
  m = _mm_add_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

SM_AVX2 float scale_max_avx2(float* p, int64_t n, float scale, float init) {
  __m256 mx = _mm256_set1_ps(init);
  const __m256 s = _mm256_set1_ps(scale);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(p + j), s);
    _mm256_storeu_ps(p + j, v);
    mx = _mm256_max_ps(mx, v);
  }
  float m = hmax256(mx);
  for (; j < n; ++j) m = std::max(m, p[j] *= scale);
  return m;
}

SM_AVX2 float exp_shift_sum_avx2(float* p, int64_t n, float shift) {
  __m256 sum = _mm256_setzero_ps();
  const __m256 s = _mm256_set1_ps(shift);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(p + j), s));
    _mm256_storeu_ps(p + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (j < n) {  // the tail through a padded copy, so every value takes the same polynomial
    alignas(32) float t[8];
    std::fill_n(t, 8, kMinX - 1.0f + shift);  // e^(below kMinX) = 0
    std::copy(p + j, p + n, t);
    const __m256 e = exp256(_mm256_sub_ps(_mm256_load_ps(t), s));
    _mm256_store_ps(t, e);
    std::copy(t, t + (n - j), p + j);
    sum = _mm256_add_ps(sum, e);
  }
  return hsum256(sum);
}

SM_AVX2 void silu_mul_avx2(const float* g, const float* u, float* h, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 gv = _mm256_loadu_ps(g + j);
    const __m256 e = exp256(_mm256_min_ps(_mm256_sub_ps(_mm256_setzero_ps(), gv), _mm256_set1_ps(kMaxX)));
    _mm256_storeu_ps(h + j, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + j)));
  }
  if (j < n) {  // the tail through padded copies, so every value takes the same polynomial
    alignas(32) float tg[8] = {}, tu[8] = {};
    std::copy(g + j, g + n, tg);
    std::copy(u + j, u + n, tu);
    silu_mul_avx2(tg, tu, tg, 8);
    std::copy(tg, tg + (n - j), h + j);
  }
}

}  // namespace

void silu_mul(const float* g, const float* u, float* h, int64_t n) {
  const Isa isa = kernel_config().isa;
  if (isa >= Isa::Avx512Vnni) return silu_mul_avx512(g, u, h, n);
  if (isa >= Isa::Avx2) return silu_mul_avx2(g, u, h, n);
  ref::silu_mul(g, u, h, n);
}

float scale_max(float* p, int64_t n, float scale, float init) {
  const Isa isa = kernel_config().isa;
  if (isa >= Isa::Avx512Vnni) return scale_max_avx512(p, n, scale, init);
  if (isa >= Isa::Avx2) return scale_max_avx2(p, n, scale, init);
  return ref::scale_max(p, n, scale, init);
}

float exp_shift_sum(float* p, int64_t n, float shift) {
  const Isa isa = kernel_config().isa;
  if (isa >= Isa::Avx512Vnni) return exp_shift_sum_avx512(p, n, shift);
  if (isa >= Isa::Avx2) return exp_shift_sum_avx2(p, n, shift);
  return ref::exp_shift_sum(p, n, shift);
}

namespace ref {

float scale_max(float* p, int64_t n, float scale, float init) {
  float m = init;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, p[j] *= scale);
  return m;
}

float exp_shift_sum(float* p, int64_t n, float shift) {
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += p[j] = std::exp(p[j] - shift);
  return float(s);
}

void silu_mul(const float* g, const float* u, float* h, int64_t n) {
  for (int64_t j = 0; j < n; ++j) h[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
}

}  // namespace ref
}  // namespace moelsp::kernels
