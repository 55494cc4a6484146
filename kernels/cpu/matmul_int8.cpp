// Quantized weights × int8 activations (AVX2): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and
// MXFP4 against 32-value blocks, Q4_K, Q5_K and Q6_K against 256-value blocks
// (the other types: matmul_int8_decoded.cpp). Performance
// model: a Q8_0 block is one 32-byte load of weights and one of activations,
// two sign ops, one maddubs (u8·s8 pairs → s16), one madd (→ s32), a convert
// and an FMA with the two scales: ~8 instructions per 32 MACs, where the f32
// path spends 4 FMAs plus the expansion of the weights. The K-quants' 4-, 5-
// and 6-bit values are unsigned, so they go straight into maddubs; their
// per-sub-block scales multiply the s16 pair sums in the madd, and their
// offsets (Q4_K/Q5_K's mins, Q6_K's −32) come from the activation block's
// 16-value sums, once per block. MXFP4's codes become their signed values
// (kMxfp4Values, within ±12) by one byte shuffle and take Q4_0's signed path;
// its scale is a power of two built from the exponent byte. Q4_1/Q5_1 (d·q + m)
// take their unsigned q straight into maddubs and meet the min with the
// activation block's sum, a second maddubs against ones. Decode streams one
// row at a time, two blocks per step in separate accumulators. These kernels serve decode (one input)
// and small batches; from kTileMinInputs inputs on, matmul_int8_tile.cpp's
// lane-vector kernel takes over where the ISA level has it.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "../decode_blocks.h"
#include "../quant_blocks.h"
#include "kernels/convert.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "matmul_int8.h"
#include "simd.h"

namespace moelsp::kernels {
namespace {

__attribute__((target("avx2,fma"))) void quantize_row_q8_avx2(const float* x, BlockQ8* out, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* p = x + b * 32;
    __m256 v[4], mx = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(p + 8 * k);
      mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[k]));
    }
    const float amax = simd::hmax(mx);
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
    simd::store_i8x32(q, out[b].q);
  }
}

// A 32-value weight block as 32 signed bytes, in element order.
template <DType T>
__attribute__((target("avx2,fma"))) inline __m256i block_bytes(const uint8_t* w) {
  if constexpr (T == DType::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2));
  } else if constexpr (T == DType::MXFP4) {
    // Q4_0's nibble layout (high nibbles shifted into the upper half, one mask); each code
    // becomes its value in [-12, 12] by one byte shuffle through the table (in both halves).
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + offsetof(blocks::MXFP4, qs)));
    const __m256i tbl =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks::kMxfp4Values)));
    const __m256i codes = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
                                           _mm256_set1_epi8(0x0f));
    return _mm256_shuffle_epi8(tbl, codes);
  } else {
    // Nibbles: elements 0..15 in the low halves of the 16 bytes, 16..31 in the high halves.
    constexpr size_t kQs = T == DType::Q5_0   ? offsetof(blocks::Q5_0, qs)
                           : T == DType::Q4_1 ? offsetof(blocks::Q4_1, qs)
                           : T == DType::Q5_1 ? offsetof(blocks::Q5_1, qs)
                                              : offsetof(blocks::Q4_0, qs);
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + kQs));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    if constexpr (T == DType::Q4_1) return q;              // unsigned 0..15; the min is a separate term
    if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {  // bit j of qh is the fifth bit (16) of element j
      uint32_t qh;
      std::memcpy(&qh, w + (T == DType::Q5_0 ? offsetof(blocks::Q5_0, qh) : offsetof(blocks::Q5_1, qh)), 4);
      const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                            3, 3, 3, 3, 3, 3, 3);
      const __m256i bits = _mm256_set1_epi64x(0x8040201008040201LL);
      const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(qh)), shuf);
      const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits);
      q = _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
      if constexpr (T == DType::Q5_1) return q;  // unsigned 0..31
      return _mm256_sub_epi8(q, _mm256_set1_epi8(16));
    }
    return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
  }
}

template <DType T>
constexpr size_t kBlockBytes = traits(T).type_size;

// A 32-value weight block's scale: fp16 d first in the block, or MXFP4's exponent byte.
template <DType T>
__attribute__((target("avx2,f16c"))) inline float block_scale(const uint8_t* w) {
  if constexpr (T == DType::MXFP4) return blocks::e8m0_half(w[offsetof(blocks::MXFP4, e)]);
  else return simd::half_at(w);
}

// Q4_1 and Q5_1 (value = d·q + m): unsigned q goes straight into maddubs, and
// the min meets the activation block's sum (a second maddubs against ones).
template <DType T>
constexpr bool kHasMin = T == DType::Q4_1 || T == DType::Q5_1;

// acc += d_w·d_x·Σ q_w·q_x (+ m_w·d_x·Σ q_x for Q4_1/Q5_1), qw = block_bytes<T>(w).
template <DType T>
__attribute__((target("avx2,fma,f16c"))) inline __m256 block_fma(__m256i qw, const uint8_t* w, const BlockQ8& x,
                                                                 __m256 acc) {
  const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q));
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (kHasMin<T>) {
    const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(qw, qx), ones));
    const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), qx), ones));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(block_scale<T>(w) * x.d), p, acc);
    return _mm256_fmadd_ps(_mm256_set1_ps(simd::half_at(w + 2) * x.d), s, acc);  // m follows d in both blocks
  } else {
    // maddubs wants unsigned × signed: |x| × (w with x's sign). Weights are in [-127, 127].
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qw, qx));
    return _mm256_fmadd_ps(_mm256_set1_ps(block_scale<T>(w) * x.d), _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones)),
                           acc);
  }
}

using simd::hsum;

// One weight row against M inputs (a decode batch, or an expert's few
// tokens): each weight block is loaded and widened once for all of them, and
// the row streams alone (see matmul_q32_int8). Sums in dot_q32_1x1's order,
// so an input's value does not depend on how many inputs share the call.
template <DType T, int M>
__attribute__((target("avx2,fma,f16c"))) void dot_q32_1xm(const uint8_t* w, const BlockQ8* x, int64_t nb, float* out) {
  __m256 acc[2][M];
  for (int i = 0; i < M; ++i) acc[0][i] = acc[1][i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, w += kBlockBytes<T>) {
    const __m256i qw = block_bytes<T>(w);
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) acc[b & 1][i] = block_fma<T>(qw, w, x[i * nb + b], acc[b & 1][i]);
  }
  for (int i = 0; i < M; ++i) out[i] = hsum(_mm256_add_ps(acc[0][i], acc[1][i]));
}

// Two blocks per step into separate accumulators (more independent work in flight).
template <DType T>
__attribute__((target("avx2,fma,f16c"))) float dot_q32_1x1(const uint8_t* w, const BlockQ8* x, int64_t nb) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2, w += 2 * kBlockBytes<T>) {
    acc0 = block_fma<T>(block_bytes<T>(w), w, x[b], acc0);
    acc1 = block_fma<T>(block_bytes<T>(w + kBlockBytes<T>), w + kBlockBytes<T>, x[b + 1], acc1);
  }
  if (b < nb) acc0 = block_fma<T>(block_bytes<T>(w), w, x[b], acc0);
  return hsum(_mm256_add_ps(acc0, acc1));
}

__attribute__((target("avx2,fma"))) void quantize_row_q8_k_avx2(const float* x, BlockQ8K* out, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* p = x + b * 256;
    // The signed value of largest magnitude (the first one, as the reference's scan finds it).
    __m256 mx = _mm256_setzero_ps();
    for (int k = 0; k < 32; ++k) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(p + 8 * k)));
    const float amax = simd::hmax(mx);
    float max = 0;
    for (int i = 0; i < 256; ++i)
      if (std::fabs(p[i]) == amax) {
        max = p[i];
        break;
      }
    const float iscale = amax > 0 ? -127.0f / max : 0.0f;
    out[b].d = amax > 0 ? 1.0f / iscale : 0.0f;
    const __m256 vis = _mm256_set1_ps(iscale), lim = _mm256_set1_ps(127.0f);
    for (int g = 0; g < 8; ++g) {  // 32 values at a time; cvtps rounds half to even (the default mode)
      __m256i q[4];
      for (int k = 0; k < 4; ++k)
        q[k] = _mm256_cvtps_epi32(
            _mm256_min_ps(lim, _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(p + 32 * g + 8 * k), vis),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
      simd::store_i8x32(q, out[b].q + 32 * g);
    }
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += out[b].q[16 * g + i];
      out[b].bsums[g] = int16_t(s);
    }
  }
}

// Byte-shuffle control that copies 16-bit lane k (of each 128-bit half) to every lane.
// pair: lane k in the low half, lane k + 1 in the high half.
struct Pick16 {
  alignas(32) uint8_t m[8][32];
  alignas(32) uint8_t pair[7][32];
  constexpr Pick16() : m{}, pair{} {
    for (int k = 0; k < 8; ++k)
      for (int i = 0; i < 32; i += 2) {
        m[k][i] = uint8_t(2 * k), m[k][i + 1] = uint8_t(2 * k + 1);
        if (k < 7) pair[k][i] = uint8_t(2 * (k + i / 16)), pair[k][i + 1] = uint8_t(2 * (k + i / 16) + 1);
      }
  }
};
constexpr Pick16 kPick16;
__attribute__((target("avx2"))) inline __m256i pick16(int k) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(kPick16.m[k]));
}
__attribute__((target("avx2"))) inline __m256i pick16_pair(int k) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(kPick16.pair[k]));
}

// One Q4_K super-block's contribution: Σ d·scale_j·(q·x) into acc, Σ
// dmin·min_j·sum_j into acc_min. Scales and mins are widened to 16 bits in
// vectors: a sub-block's scale multiplies its maddubs pair sums inside the
// madd, and the mins meet the activation's 16-value sums (added pairwise to
// 32-value sums) in one madd.
// Q5_K (kFive): the same with the nibbles at +48 and qh[32] at +16, whose bit
// j is the fifth bit (16) of sub-block j's values.
// One Q4_K/Q5_K super-block's contribution for M inputs (x[i·nb], i < M):
// the weights' nibbles and scales are unpacked once for all of them.
template <bool kFive, int M>
__attribute__((target("avx2,fma,f16c"))) inline void q4_k_block(const uint8_t* w, const BlockQ8K* x, int64_t nb,
                                                                __m256* acc, __m256* acc_min) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), m1 = _mm256_set1_epi8(1);
  __m256i qh = kFive ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16)) : _mm256_setzero_si256();
  uint32_t sm[4];
  blocks::k4_unpack_scales(w + 4, sm);
  const __m256i sm16 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm)));
  const float dmin = simd::half_at(w + 2), d = simd::half_at(w);
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
    const BlockQ8K& xi = x[i * nb];
    const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xi.bsums)),
                                      _mm_loadu_si128(reinterpret_cast<const __m128i*>(xi.bsums + 8)));
    const __m128i mins = _mm_madd_epi16(_mm256_extracti128_si256(sm16, 1), bs);  // 4 × (min·sum + min·sum)
    acc_min[i] =
        _mm256_fmadd_ps(_mm256_set1_ps(dmin * xi.d), _mm256_cvtepi32_ps(_mm256_castsi128_si256(mins)), acc_min[i]);
  }
  // Scale j (16-bit lane j of the low half) in both halves, then picked per sub-block by a byte shuffle.
  const __m256i sc = _mm256_permute2x128_si256(sm16, sm16, 0x00);
  __m256i sumi[M];
  for (int i = 0; i < M; ++i) sumi[i] = _mm256_setzero_si256();
  for (int j = 0; j < 4; ++j) {  // 64 values: low nibbles are sub-block 2j, high nibbles 2j + 1
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + (kFive ? 48 : 16) + 32 * j));
    __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if constexpr (kFive) {  // bits 2j and 2j + 1; qh moves down two bits per step
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qh, m1), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), m1), 4));
      qh = _mm256_srli_epi16(qh, 2);
    }
    const __m256i s_lo = _mm256_shuffle_epi8(sc, pick16(2 * j)), s_hi = _mm256_shuffle_epi8(sc, pick16(2 * j + 1));
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) {
      const int8_t* xq = x[i * nb].q + 64 * j;
      const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
      const __m256i xh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32));
      const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xl), s_lo);
      const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xh), s_hi);
      sumi[i] = _mm256_add_epi32(sumi[i], _mm256_add_epi32(pl, ph));
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i)
    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[i * nb].d), _mm256_cvtepi32_ps(sumi[i]), acc[i]);
}

// A row against M inputs (x + i·nb), even and odd super-blocks into separate
// accumulators (more independent work in flight); the same sums in the same
// order for every M, so an input's value never depends on its company.
template <bool kFive, int M>
__attribute__((target("avx2,fma,f16c"))) void dot_q4_k(const uint8_t* w, const BlockQ8K* x, int64_t nb, float* out) {
  constexpr size_t kBytes = kFive ? sizeof(blocks::Q5_K) : sizeof(blocks::Q4_K);
  __m256 acc[2][M], acc_min[2][M];
  for (int i = 0; i < M; ++i) acc[0][i] = acc[1][i] = acc_min[0][i] = acc_min[1][i] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {  // written out two at a time: ~7% faster at M = 1 than a plain loop
    q4_k_block<kFive, M>(w + kBytes * b, x + b, nb, acc[0], acc_min[0]);
    q4_k_block<kFive, M>(w + kBytes * (b + 1), x + b + 1, nb, acc[1], acc_min[1]);
  }
  if (b < nb) q4_k_block<kFive, M>(w + kBytes * b, x + b, nb, acc[0], acc_min[0]);
  for (int i = 0; i < M; ++i)
    out[i] = hsum(_mm256_add_ps(acc[0][i], acc[1][i])) - hsum(_mm256_add_ps(acc_min[0][i], acc_min[1][i]));
}

// One Q6_K super-block's contribution for M inputs (x[i·nb]), unpacked once.
template <int M>
__attribute__((target("avx2,fma,f16c"))) inline void q6_k_block(const uint8_t* w, const BlockQ8K* x, int64_t nb,
                                                                __m256* acc) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
  // The 16 scales as 16-bit values; the −32 of every value is Σ_g scale_g · 32 · bsum_g, one madd.
  const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192)));
  __m256i sumi[M];
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
    const __m256i offset =
        _mm256_madd_epi16(sc16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i * nb].bsums)));
    sumi[i] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5));
  }
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = w + 64 * half;
    const __m256i sc = half ? _mm256_permute2x128_si256(sc16, sc16, 0x11) : _mm256_permute2x128_si256(sc16, sc16, 0x00);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128 + 32 * half));
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
    // Four runs of 32 values (q1..q4 of the reference), each 6 bits: low nibble | two high bits << 4.
    const __m256i q[4] = {
        _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4)),
        _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4))};
    for (int k = 0; k < 4; ++k) {
      // The run's two 16-value groups 2k and 2k + 1 (of this half): one scale per 128-bit half.
      const __m256i s = _mm256_shuffle_epi8(sc, pick16_pair(2 * k));
#pragma GCC unroll 4
      for (int i = 0; i < M; ++i) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i * nb].q + 128 * half + 32 * k));
        sumi[i] = _mm256_add_epi32(sumi[i], _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], xv), s));
      }
    }
  }
  const float d = simd::half_at(w + offsetof(blocks::Q6_K, d));
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i)
    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[i * nb].d), _mm256_cvtepi32_ps(sumi[i]), acc[i]);
}

// As dot_q4_k.
template <int M>
__attribute__((target("avx2,fma,f16c"))) void dot_q6_k(const uint8_t* w, const BlockQ8K* x, int64_t nb, float* out) {
  __m256 acc[2][M];
  for (int i = 0; i < M; ++i) acc[0][i] = acc[1][i] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    q6_k_block<M>(w + sizeof(blocks::Q6_K) * b, x + b, nb, acc[0]);
    q6_k_block<M>(w + sizeof(blocks::Q6_K) * (b + 1), x + b + 1, nb, acc[1]);
  }
  if (b < nb) q6_k_block<M>(w + sizeof(blocks::Q6_K) * b, x + b, nb, acc[0]);
  for (int i = 0; i < M; ++i) out[i] = hsum(_mm256_add_ps(acc[0][i], acc[1][i]));
}

thread_local std::vector<BlockQ8> tls_xq;
thread_local std::vector<BlockQ8K> tls_xk;

}  // namespace

void quantize_row_q8_simd(const float* x, BlockQ8* out, int64_t n) { quantize_row_q8_avx2(x, out, n); }
void quantize_row_q8_k_simd(const float* x, BlockQ8K* out, int64_t n) { quantize_row_q8_k_avx2(x, out, n); }

bool int8_path_available(const MatmulArgs& a, const KernelConfig& cfg) {
  return traits(a.w.type).kernel == Kernel::Int8 && cfg.isa >= Isa::Avx2 && cfg.activations == Activations::Int8;
}

namespace {

// One K-quant row against M inputs.
template <DType T, int M>
void dot_k(const uint8_t* w, const BlockQ8K* x, int64_t nb, float* out) {
  if constexpr (T == DType::Q6_K) dot_q6_k<M>(w, x, nb, out);
  else dot_q4_k<T == DType::Q5_K, M>(w, x, nb, out);
}

template <DType T>
void matmul_k_int8(const MatmulArgs& a, Isa isa) {
  const int64_t nb = a.w.cols / 256;
  by_chunks(a, nb, tls_xk, quantize_row_q8_k_avx2, [&](int64_t i0, int64_t i1) {
    if (int8_tile_supports(T, i1 - i0, isa)) return matmul_int8_tile(a, i0, i1, tls_xk.data(), isa);
    // Fewer inputs than the lane-vector kernel wants: one row streams at a
    // time (see matmul_q32_int8), unpacked once for kM inputs (measured on
    // 768 × 2048, GMAC/s per thread at 1 / 2 / 3 inputs: Q4_K 35 / 41 / 34,
    // the third input's registers spill; Q6_K 31 / 42 / 43).
    constexpr int kM = T == DType::Q6_K ? 3 : 2;
    const BlockQ8K* xk = tls_xk.data();
    for (int64_t r = a.row_begin; r < a.row_end; ++r) {
      float o[kM];
      int64_t i = i0;
      for (; i + kM <= i1; i += kM) {
        dot_k<T, kM>(a.w.row(r), xk + (i - i0) * nb, nb, o);
        for (int k = 0; k < kM; ++k) a.y[(i + k) * a.ldy + r] = o[k];
      }
      if (kM == 3 && i + 2 == i1) dot_k<T, 2>(a.w.row(r), xk + (i - i0) * nb, nb, o);
      else if (i + 1 == i1) dot_k<T, 1>(a.w.row(r), xk + (i - i0) * nb, nb, o);
      for (int k = 0; i + k < i1; ++k) a.y[(i + k) * a.ldy + r] = o[k];
    }
  });
}

template <DType T>
void matmul_q32_int8(const MatmulArgs& a, Isa isa) {
  const int64_t nb = a.w.cols / 32;
  by_chunks(a, nb, tls_xq, quantize_row_q8_avx2, [&](int64_t i0, int64_t i1) {
    if (int8_tile_supports(T, i1 - i0, isa)) return matmul_int8_tile(a, i0, i1, tls_xq.data(), isa);
    // One row streams at a time, against every input of the chunk: several
    // interleaved row streams defeat the hardware prefetcher (measured on a
    // 2.7 B Q8_0 model at 2 threads: 4-row lockstep decoded 47 tokens/s,
    // row-at-a-time 105; on a 16384 × 2048 matrix with 2 inputs, 15 GMAC/s
    // against 31+ for one row with both inputs).
    const BlockQ8* xq = tls_xq.data();
    for (int64_t r = a.row_begin; r < a.row_end; ++r) {
      int64_t i = i0;
      float o[3];
      for (; i + 3 <= i1; i += 3) {
        dot_q32_1xm<T, 3>(a.w.row(r), xq + (i - i0) * nb, nb, o);
        for (int k = 0; k < 3; ++k) a.y[(i + k) * a.ldy + r] = o[k];
      }
      if (i + 2 == i1) {
        dot_q32_1xm<T, 2>(a.w.row(r), xq + (i - i0) * nb, nb, o);
        a.y[i * a.ldy + r] = o[0], a.y[(i + 1) * a.ldy + r] = o[1];
      } else if (i + 1 == i1) {
        a.y[i * a.ldy + r] = dot_q32_1x1<T>(a.w.row(r), xq + (i - i0) * nb, nb);
      }
    }
  });
}

}  // namespace

void matmul_int8(const MatmulArgs& a, Isa isa) {
  switch (a.w.type) {
    case DType::Q4_1: return matmul_q32_int8<DType::Q4_1>(a, isa);  // prompts: the decoded tile kernel
    case DType::Q5_1: return matmul_q32_int8<DType::Q5_1>(a, isa);
    default:
      if (blocks::is_decoded(a.w.type)) return matmul_int8_decoded(a, isa);
  }
  switch (a.w.type) {
    case DType::Q8_0: return matmul_q32_int8<DType::Q8_0>(a, isa);
    case DType::Q4_0: return matmul_q32_int8<DType::Q4_0>(a, isa);
    case DType::Q5_0: return matmul_q32_int8<DType::Q5_0>(a, isa);
    case DType::MXFP4: return matmul_q32_int8<DType::MXFP4>(a, isa);
    case DType::Q4_K: return matmul_k_int8<DType::Q4_K>(a, isa);
    case DType::Q5_K: return matmul_k_int8<DType::Q5_K>(a, isa);
    default: return matmul_k_int8<DType::Q6_K>(a, isa);
  }
}

}  // namespace moelsp::kernels
