// CPU matmul. Performance model: decode (m = 1) streams every weight byte once,
// so it is bound by memory bandwidth; a quantized row is expanded to f32 in a
// thread-local buffer that stays in L1, then dotted with each of the m inputs,
// so prefill reuses each dequantized row m times. The fast K-quant and int8
// dot-product kernels of the quantization issue replace this path.
#include <immintrin.h>

#include <cstring>
#include <vector>

#include "kernels/convert.h"
#include "kernels/matmul.h"
#include "../quant_blocks.h"

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

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  acc0 = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  float r = _mm_cvtss_f32(s);
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

__attribute__((target("avx2,fma"))) void axpy_avx2(float s, const float* x, float* y, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vs, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += s * x[i];
}

void axpy_scalar(float s, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += s * x[i];
}

__attribute__((target("avx2,f16c"))) void f16_row_avx2(const uint16_t* h, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  for (; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}

__attribute__((target("avx2"))) void q8_0_row_avx2(const uint8_t* b, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 32, b += 34) {
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
  for (int64_t i = 0; i < n; i += 256, b += 144) {
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
  for (int64_t i = 0; i < n; i += 256, b += 210) {
    const float d = half_at(b + 208);
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b + 64 * half;
      const uint8_t* qh = b + 128 + 32 * half;
      const int8_t* s = scales + 8 * half;
      float* y = dst + i + 128 * half;
      for (int l = 0; l < 32; l += 8) {
        const int is = l / 16;
        const __m256i a = load_u8x8(ql + l), c = load_u8x8(ql + l + 32), h = load_u8x8(qh + l);
        const __m256i q1 = _mm256_sub_epi32(_mm256_or_si256(_mm256_and_si256(a, nib), _mm256_slli_epi32(_mm256_and_si256(h, two), 4)), off);
        const __m256i q2 = _mm256_sub_epi32(_mm256_or_si256(_mm256_and_si256(c, nib), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2), two), 4)), off);
        const __m256i q3 = _mm256_sub_epi32(_mm256_or_si256(_mm256_srli_epi32(a, 4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 4), two), 4)), off);
        const __m256i q4 = _mm256_sub_epi32(_mm256_or_si256(_mm256_srli_epi32(c, 4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 6), two), 4)), off);
        _mm256_storeu_ps(y + l, _mm256_mul_ps(_mm256_set1_ps(d * float(s[is])), _mm256_cvtepi32_ps(q1)));
        _mm256_storeu_ps(y + l + 32, _mm256_mul_ps(_mm256_set1_ps(d * float(s[is + 2])), _mm256_cvtepi32_ps(q2)));
        _mm256_storeu_ps(y + l + 64, _mm256_mul_ps(_mm256_set1_ps(d * float(s[is + 4])), _mm256_cvtepi32_ps(q3)));
        _mm256_storeu_ps(y + l + 96, _mm256_mul_ps(_mm256_set1_ps(d * float(s[is + 6])), _mm256_cvtepi32_ps(q4)));
      }
    }
  }
}

struct Isa {
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  bool f16c = __builtin_cpu_supports("f16c");
};
const Isa& isa() {
  static const Isa i;
  return i;
}

// Returns a pointer to row r as f32: the row itself for F32 weights, else
// `buf` filled with the dequantized row.
const float* row_f32(const MatView& w, int64_t r, float* buf) {
  const uint8_t* src = w.row(r);
  switch (w.type) {
    case DType::F32:
      return reinterpret_cast<const float*>(src);
    case DType::F16:
      if (isa().avx2 && isa().f16c) f16_row_avx2(reinterpret_cast<const uint16_t*>(src), buf, w.cols);
      else ref::dequantize_row(w.type, src, buf, w.cols);
      return buf;
    case DType::Q8_0:
      if (isa().avx2) q8_0_row_avx2(src, buf, w.cols);
      else ref::dequantize_row(w.type, src, buf, w.cols);
      return buf;
    case DType::Q4_K:
      if (isa().avx2) q4_k_row_avx2(src, buf, w.cols);
      else ref::dequantize_row(w.type, src, buf, w.cols);
      return buf;
    case DType::Q6_K:
      if (isa().avx2) q6_k_row_avx2(src, buf, w.cols);
      else ref::dequantize_row(w.type, src, buf, w.cols);
      return buf;
    default:
      ref::dequantize_row(w.type, src, buf, w.cols);
      return buf;
  }
}

thread_local std::vector<float> tls_row;

}  // namespace

bool matmul_supports(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0:
    case DType::Q4_0: case DType::Q5_0: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  MatView w{src, t, n, 1, 0};
  const float* r = row_f32(w, 0, dst);
  if (r != dst) std::memcpy(dst, r, size_t(n) * sizeof(float));
}

float dot_f32(const float* a, const float* b, int64_t n) {
  return isa().avx2 ? dot_avx2(a, b, n) : dot_scalar(a, b, n);
}

void matmul(const MatmulArgs& a) {
  if (tls_row.size() < size_t(a.w.cols)) tls_row.resize(size_t(a.w.cols));
  const bool avx2 = isa().avx2;
  for (int64_t r = a.row_begin; r < a.row_end; ++r) {
    const float* w = row_f32(a.w, r, tls_row.data());
    for (int64_t i = 0; i < a.m; ++i)
      a.y[i * a.ldy + r] = avx2 ? dot_avx2(w, a.x + i * a.ldx, a.w.cols) : dot_scalar(w, a.x + i * a.ldx, a.w.cols);
  }
}

void matmul_t_accumulate(const MatView& w, const float* s, float* y, int64_t row_begin, int64_t row_end) {
  if (tls_row.size() < size_t(w.cols)) tls_row.resize(size_t(w.cols));
  const bool avx2 = isa().avx2;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* wr = row_f32(w, r, tls_row.data());
    if (avx2) axpy_avx2(s[r], wr, y, w.cols);
    else axpy_scalar(s[r], wr, y, w.cols);
  }
}

}  // namespace moelsp::kernels
