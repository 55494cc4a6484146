// Internal: small AVX2 helpers shared by the CPU kernels.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace moelsp::kernels::simd {

// Sum and maximum of eight floats.
__attribute__((target("avx2"))) inline float hsum(__m256 v) {
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_shuffle_ps(t, t, 1));
  return _mm_cvtss_f32(t);
}
__attribute__((target("avx2"))) inline float hmax(__m256 v) {
  __m128 t = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  t = _mm_max_ps(t, _mm_movehl_ps(t, t));
  t = _mm_max_ss(t, _mm_shuffle_ps(t, t, 1));
  return _mm_cvtss_f32(t);
}

__attribute__((target("avx2"))) inline int32_t hsum_epi32(__m256i v) {
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  t = _mm_add_epi32(t, _mm_unpackhi_epi64(t, t));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 1));
  return _mm_cvtsi128_si32(t);
}

// The fp16 value at p (F16C's one-value conversion): block scales.
__attribute__((target("avx2,f16c"))) inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 4×8 int32 (each in [-128, 127]) → 32 int8 in order: the packs interleave
// 128-bit lanes, the permute restores the order.
__attribute__((target("avx2"))) inline void store_i8x32(const __m256i q[4], int8_t* dst) {
  const __m256i a = _mm256_packs_epi32(q[0], q[1]), c = _mm256_packs_epi32(q[2], q[3]);
  const __m256i bytes =
      _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, c), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), bytes);
}

}  // namespace moelsp::kernels::simd
