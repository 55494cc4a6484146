// AVX2 versions of decode_blocks.h's values(): the same signed bytes, written
// 32 at a time (internal to kernels/cpu). The scalar decoders spend ~4 cycles
// per weight (a shift, a mask, a byte store — and the vector load that follows
// the byte stores stalls on store forwarding), which bounded decode of these
// types at 1-4 GMAC/s per thread; here the 2/3/4-bit types unpack with shifts
// and masks on whole vectors, the table types with one byte shuffle, and the
// i-quants with one 8- or 4-byte codebook load per 8 or 4 weights and the
// signs applied as a vector (bytes spread from the sign bits, then
// (g ^ mask) − mask). tests/test_quant_types.cpp checks every type's bytes
// against values() on real and random blocks.
#pragma once

#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "../decode_blocks.h"

namespace moelsp::kernels::blocks::simd_decode {

#define MOELSP_DECODE_TARGET __attribute__((target("avx2,fma,f16c")))

// The 128 sign bytes of IQ2/IQ3 (sign_byte of each 7-bit set), as a table.
inline constexpr std::array<uint8_t, 128> kSigns = [] {
  std::array<uint8_t, 128> t{};
  for (uint32_t i = 0; i < 128; ++i) t[i] = iq::sign_byte(i);
  return t;
}();

// Four sign bytes (byte k: the signs of weights 8k .. 8k + 7) → 32 byte masks (0xff: negate).
MOELSP_DECODE_TARGET inline __m256i sign_masks(uint32_t signs) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int32_t(signs)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bits = _mm256_set1_epi64x(0x8040201008040201LL);
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits);
}
MOELSP_DECODE_TARGET inline __m256i apply_signs(__m256i g, __m256i mask) {
  return _mm256_sub_epi8(_mm256_xor_si256(g, mask), mask);
}
MOELSP_DECODE_TARGET inline void store(int8_t* q, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), v); }
// 16 nibble bytes → 32 values: the low nibbles, then the high ones.
MOELSP_DECODE_TARGET inline __m256i nibbles(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
}
// 4 bytes (32 bits) → 32 bytes, byte j = 16 where bit j is set (Q5_1's fifth bits).
MOELSP_DECODE_TARGET inline __m256i bits_to_16(uint32_t bits) {
  return _mm256_and_si256(sign_masks(bits), _mm256_set1_epi8(0x10));
}

template <DType T>
struct Values;  // values(b, q) for every decode_blocks.h type

template <>
struct Values<DType::Q4_1> {
  MOELSP_DECODE_TARGET static void values(const uint8_t* b, int8_t* q) { store(q, nibbles(b + offsetof(Q4_1, qs))); }
};
template <>
struct Values<DType::Q5_1> {
  MOELSP_DECODE_TARGET static void values(const uint8_t* b, int8_t* q) {
    store(q, _mm256_or_si256(nibbles(b + offsetof(Q5_1, qs)), bits_to_16(detail::u32_at(b + offsetof(Q5_1, qh)))));
  }
};
template <>
struct Values<DType::IQ4_NL> {
  MOELSP_DECODE_TARGET static void values(const uint8_t* b, int8_t* q) {
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
    store(q, _mm256_shuffle_epi8(tbl, nibbles(b + offsetof(IQ4_NL, qs))));
  }
};
template <>
struct Values<DType::IQ4_XS> {
  MOELSP_DECODE_TARGET static void values(const uint8_t* b, int8_t* q) {
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
    for (int ib = 0; ib < 8; ++ib)
      store(q + 32 * ib, _mm256_shuffle_epi8(tbl, nibbles(b + offsetof(IQ4_XS, qs) + 16 * ib)));
  }
};
template <>
struct Values<DType::Q2_K> {
  MOELSP_DECODE_TARGET static void values(const uint8_t* b, int8_t* q) {
    const __m256i m2 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + offsetof(Q2_K, qs) + 32 * h));
      for (int j = 0; j < 4; ++j)
        store(q + 128 * h + 32 * j, _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * j)), m2));
    }
  }
};
template <>
struct Values<DType::Q3_K> {
  MOELSP_DECODE_TARGET static void values(const uint8_t* b, int8_t* q) {
    const __m256i m2 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + offsetof(Q3_K, hmask)));
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + offsetof(Q3_K, qs) + 32 * h));
      for (int j = 0; j < 4; ++j) {
        const __m256i low = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * j)), m2);
        const __m256i bit = _mm256_set1_epi8(char(1 << (4 * h + j)));
        const __m256i unset = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), _mm256_setzero_si256());
        store(q + 128 * h + 32 * j, _mm256_sub_epi8(low, _mm256_and_si256(unset, four)));
      }
    }
  }
};
template <>
struct Values<DType::IQ2_XXS> {
  MOELSP_DECODE_TARGET static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ2_XXS, qs);
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t idx = detail::u32_at(qs + 8 * ib), aux = detail::u32_at(qs + 8 * ib + 4);
      const __m256i g =
          _mm256_setr_epi64x(int64_t(iq::kIq2xxsGrid[idx & 255]), int64_t(iq::kIq2xxsGrid[(idx >> 8) & 255]),
                             int64_t(iq::kIq2xxsGrid[(idx >> 16) & 255]), int64_t(iq::kIq2xxsGrid[idx >> 24]));
      const uint32_t s = kSigns[aux & 127] | uint32_t(kSigns[(aux >> 7) & 127]) << 8 |
                         uint32_t(kSigns[(aux >> 14) & 127]) << 16 | uint32_t(kSigns[(aux >> 21) & 127]) << 24;
      store(q + 32 * ib, apply_signs(g, sign_masks(s)));
    }
  }
};
template <>
struct Values<DType::IQ2_XS> {
  MOELSP_DECODE_TARGET static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ2_XS, qs);
    for (int ib = 0; ib < 8; ++ib) {
      uint16_t v[4];
      std::memcpy(v, qs + 8 * ib, 8);
      const __m256i g = _mm256_setr_epi64x(int64_t(iq::kIq2xsGrid[v[0] & 511]), int64_t(iq::kIq2xsGrid[v[1] & 511]),
                                           int64_t(iq::kIq2xsGrid[v[2] & 511]), int64_t(iq::kIq2xsGrid[v[3] & 511]));
      const uint32_t s = kSigns[v[0] >> 9] | uint32_t(kSigns[v[1] >> 9]) << 8 | uint32_t(kSigns[v[2] >> 9]) << 16 |
                         uint32_t(kSigns[v[3] >> 9]) << 24;
      store(q + 32 * ib, apply_signs(g, sign_masks(s)));
    }
  }
};
template <>
struct Values<DType::IQ2_S> {
  MOELSP_DECODE_TARGET static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ2_S, qs);
    const uint8_t* qh = b + offsetof(IQ2_S, qh);
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t h = qh[ib];
      const __m256i g = _mm256_setr_epi64x(int64_t(iq::kIq2sGrid[qs[4 * ib] | ((h << 8) & 0x300)]),
                                           int64_t(iq::kIq2sGrid[qs[4 * ib + 1] | ((h << 6) & 0x300)]),
                                           int64_t(iq::kIq2sGrid[qs[4 * ib + 2] | ((h << 4) & 0x300)]),
                                           int64_t(iq::kIq2sGrid[qs[4 * ib + 3] | ((h << 2) & 0x300)]));
      store(q + 32 * ib, apply_signs(g, sign_masks(detail::u32_at(qs + 32 + 4 * ib))));
    }
  }
};
template <>
struct Values<DType::IQ3_XXS> {
  MOELSP_DECODE_TARGET static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ3_XXS, qs);
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* i = qs + 8 * ib;
      const __m256i g = _mm256_setr_epi32(int32_t(iq::kIq3xxsGrid[i[0]]), int32_t(iq::kIq3xxsGrid[i[1]]),
                                          int32_t(iq::kIq3xxsGrid[i[2]]), int32_t(iq::kIq3xxsGrid[i[3]]),
                                          int32_t(iq::kIq3xxsGrid[i[4]]), int32_t(iq::kIq3xxsGrid[i[5]]),
                                          int32_t(iq::kIq3xxsGrid[i[6]]), int32_t(iq::kIq3xxsGrid[i[7]]));
      const uint32_t aux = detail::u32_at(qs + 64 + 4 * ib);
      const uint32_t s = kSigns[aux & 127] | uint32_t(kSigns[(aux >> 7) & 127]) << 8 |
                         uint32_t(kSigns[(aux >> 14) & 127]) << 16 | uint32_t(kSigns[(aux >> 21) & 127]) << 24;
      store(q + 32 * ib, apply_signs(g, sign_masks(s)));
    }
  }
};
template <>
struct Values<DType::IQ3_S> {
  MOELSP_DECODE_TARGET static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ3_S, qs);
    const uint8_t* qh = b + offsetof(IQ3_S, qh);
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* i = qs + 8 * ib;
      const uint32_t h = qh[ib];  // bit k: the ninth index bit of grid entry k
      const auto at = [&](int k) { return int32_t(iq::kIq3sGrid[i[k] | (((h >> k) & 1) << 8)]); };
      const __m256i g = _mm256_setr_epi32(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7));
      store(q + 32 * ib, apply_signs(g, sign_masks(detail::u32_at(b + offsetof(IQ3_S, signs) + 4 * ib))));
    }
  }
};
// IQ1: 8·grid ± 1 (grid bytes −1, 0, 1): three doublings, then the delta bytes.
MOELSP_DECODE_TARGET inline __m256i iq1_scale(__m256i g, __m256i delta) {
  g = _mm256_add_epi8(g, g);
  g = _mm256_add_epi8(g, g);
  return _mm256_add_epi8(_mm256_add_epi8(g, g), delta);
}
template <>
struct Values<DType::IQ1_S> {
  MOELSP_DECODE_TARGET static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ1_S, qs);
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t h = detail::u16_at(b + offsetof(IQ1_S, qh) + 2 * size_t(ib));
      const __m256i g = _mm256_setr_epi64x(int64_t(iq::kIq1sGrid[qs[4 * ib] | ((h << 8) & 0x700)]),
                                           int64_t(iq::kIq1sGrid[qs[4 * ib + 1] | ((h << 5) & 0x700)]),
                                           int64_t(iq::kIq1sGrid[qs[4 * ib + 2] | ((h << 2) & 0x700)]),
                                           int64_t(iq::kIq1sGrid[qs[4 * ib + 3] | ((h >> 1) & 0x700)]));
      store(q + 32 * ib, iq1_scale(g, _mm256_set1_epi8(h & 0x8000 ? -1 : 1)));
    }
  }
};
template <>
struct Values<DType::IQ1_M> {
  MOELSP_DECODE_TARGET static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ1_M, qs);
    const uint8_t* qh = b + offsetof(IQ1_M, qh);
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t h0 = qh[2 * ib], h1 = qh[2 * ib + 1];
      const __m256i g = _mm256_setr_epi64x(int64_t(iq::kIq1sGrid[qs[4 * ib] | ((h0 << 8) & 0x700)]),
                                           int64_t(iq::kIq1sGrid[qs[4 * ib + 1] | ((h0 << 4) & 0x700)]),
                                           int64_t(iq::kIq1sGrid[qs[4 * ib + 2] | ((h1 << 8) & 0x700)]),
                                           int64_t(iq::kIq1sGrid[qs[4 * ib + 3] | ((h1 << 4) & 0x700)]));
      constexpr int64_t kPlus = 0x0101010101010101LL, kMinus = -1;  // bytes +1, bytes −1
      const __m256i delta = _mm256_setr_epi64x(h0 & 0x08 ? kMinus : kPlus, h0 & 0x80 ? kMinus : kPlus,
                                               h1 & 0x08 ? kMinus : kPlus, h1 & 0x80 ? kMinus : kPlus);
      store(q + 32 * ib, iq1_scale(g, delta));
    }
  }
};

struct F16cHalf {
  MOELSP_DECODE_TARGET static float at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
  }
  MOELSP_DECODE_TARGET static float from_bits(uint16_t h) { return _cvtsh_ss(h); }
};

// 16 small integers (bytes) times d → 16 floats, the same single products as the scalar code.
MOELSP_DECODE_TARGET inline void scale16(__m128i v, float d, bool is_signed, float* out) {
  const __m256 vd = _mm256_set1_ps(d);
  const __m256i a = is_signed ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
  const __m256i b = is_signed ? _mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)) : _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8));
  _mm256_storeu_ps(out, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(a)));
  _mm256_storeu_ps(out + 8, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(b)));
}

// scales(): the scalar decoders' (with F16C), except where a vector form pays:
// Q2_K's and Q3_K's sixteen per-block scales were ~150 scalar instructions,
// more than their values.
template <DType T>
struct Scales {
  template <class D>
  MOELSP_DECODE_TARGET static void scales(const uint8_t* b, float* scale, float* min) {
    D::template scales<F16cHalf>(b, scale, min);
  }
};
template <>
struct Scales<DType::Q2_K> {
  template <class D>
  MOELSP_DECODE_TARGET static void scales(const uint8_t* b, float* scale, float* min) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + offsetof(Q2_K, scales)));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    scale16(_mm_and_si128(v, m4), F16cHalf::at(b + offsetof(Q2_K, d)), false, scale);
    scale16(_mm_and_si128(_mm_srli_epi16(v, 4), m4), F16cHalf::at(b + offsetof(Q2_K, dmin)), false, min);
  }
};
template <>
struct Scales<DType::Q3_K> {
  // The twelve bytes → sixteen 6-bit values with 32-bit masks (bytes 0-7's low
  // nibbles are scales 0-7, their high nibbles 8-15; bytes 8-11 hold the two
  // high bits of scale i at bits 2·(i / 4) of byte 8 + i % 4).
  template <class D>
  MOELSP_DECODE_TARGET static void scales(const uint8_t* b, float* scale, float*) {
    uint32_t a[4];
    std::memcpy(a, b + offsetof(Q3_K, scales), 12);
    constexpr uint32_t kLow4 = 0x0f0f0f0f, kTwo = 0x03030303;
    const uint32_t t = a[2];
    a[2] = ((a[0] >> 4) & kLow4) | (((t >> 4) & kTwo) << 4);
    a[3] = ((a[1] >> 4) & kLow4) | (((t >> 6) & kTwo) << 4);
    a[0] = (a[0] & kLow4) | ((t & kTwo) << 4);
    a[1] = (a[1] & kLow4) | (((t >> 2) & kTwo) << 4);
    const __m128i v = _mm_sub_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)), _mm_set1_epi8(32));
    scale16(v, F16cHalf::at(b + offsetof(Q3_K, d)), true, scale);
  }
};

// Decoder<T>::decode with the AVX2 values and scales.
template <class D>
MOELSP_DECODE_TARGET inline void decode(const uint8_t* b, int8_t* q, float* scale, float* min) {
  Scales<D::kType>::template scales<D>(b, scale, min);
  Values<D::kType>::values(b, q);
}

#undef MOELSP_DECODE_TARGET

}  // namespace moelsp::kernels::blocks::simd_decode
