// Block decoders for the GGUF types whose values are not plain nibbles of one
// scale: Q4_1, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS and the i-quants (internal to
// kernels/). Each turns one block into small signed integers and a float
// scale per group (and, for the types with an offset, a float min per group):
//
//   weight e = scale[e / kGroup] · q[e] − min[e / kGroup]
//
// computed in f32 exactly as ggml's dequantize_row_* computes it, so the
// reference dequantizer (kernels/ref) is this formula and matches llama.cpp
// bit for bit (tests/test_kernels.cpp checks real blocks from llama-quantize).
// The SIMD kernels take q straight into integer dot products against int8
// activations, so the format is defined here once for both paths.
//
// Why integers with a float scale for every type: the i-quants' values are
// codebook bytes times signs (IQ2: ±8/25/43, IQ3: up to ±62), IQ4's are a
// 16-entry table (−127..113), and IQ1's "grid ± 1/8" is 8·grid ± 1 with the
// scale divided by 8 (exact: a power of two), so every type fits int8 and one
// dot kernel serves them all. Performance model: decoding is scalar per
// group of 8 (a table lookup, a sign mask) and runs once per weight block,
// shared by every input of a call; decode (one input) pays it per byte read.
#pragma once

#include <cstdint>
#include <cstring>

#include "iq_grids.h"
#include "quant_blocks.h"

namespace moelsp::kernels::blocks {

// Per type: kType, kElems weights per block, kGroup weights per scale, kMin (a min per
// group), kOffset (q + kOffset ≥ 0 for every q the type can produce: what the
// unsigned-by-signed dot instructions need) and decode().
template <DType T>
struct Decoder;

namespace detail {
inline uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
// 8 grid bytes with signs: byte j negated where bit j of `signs` is set.
inline void signed8(uint64_t grid, uint32_t signs, int8_t* q) {
  for (int j = 0; j < 8; ++j) {
    const auto g = int8_t(grid >> (8 * j));
    q[j] = (signs >> j) & 1 ? int8_t(-g) : g;
  }
}
inline void signed4(uint32_t grid, uint32_t signs, int8_t* q) {
  for (int j = 0; j < 4; ++j) {
    const auto g = int8_t(grid >> (8 * j));
    q[j] = (signs >> j) & 1 ? int8_t(-g) : g;
  }
}
// IQ2_XS / IQ2_S: a byte of two 4-bit scales for the two 16-weight halves of 32.
inline void iq2_half_scales(float d, uint8_t sc, float* out) {
  out[0] = d * (0.5f + float(sc & 15)) * 0.25f;
  out[1] = d * (0.5f + float(sc >> 4)) * 0.25f;
}
// IQ1_S / IQ1_M: 8 grid values (−1, 0, 1 as int8 bytes) as 8·grid ± 1.
inline void iq1_eight(uint64_t grid, int delta, int8_t* q) {
  for (int j = 0; j < 8; ++j) q[j] = int8_t(8 * int8_t(grid >> (8 * j)) + delta);
}
}  // namespace detail

// How scales() reads the fp16 scales: the portable conversion here; the SIMD
// decoders pass F16C's (the same values: fp16 → fp32 is exact either way).
struct ScalarHalf {
  static float at(const uint8_t* p) { return half_at(p); }
  static float from_bits(uint16_t h) { return fp16_to_fp32(h); }
};

// Each decoder: scales() (the per-group floats), values() (the integers) and
// decode() (both). values() is the scalar definition; kernels/cpu/decode_simd.h
// has AVX2 versions that must give the same bytes (tests/test_quant_types.cpp).
#define MOELSP_DECODER_COMMON                                                 \
  static void decode(const uint8_t* b, int8_t* q, float* scale, float* min) { \
    scales(b, scale, min);                                                    \
    values(b, q);                                                             \
  }

template <>
struct Decoder<DType::Q4_1> {
  static constexpr DType kType = DType::Q4_1;
  static constexpr int kElems = 32, kGroup = 32, kOffset = 0;
  static constexpr bool kMin = true;
  template <class H = ScalarHalf>
  static void scales(const uint8_t* b, float* scale, float* min) {
    scale[0] = H::at(b + offsetof(Q4_1, d));
    min[0] = -H::at(b + offsetof(Q4_1, m));  // x·d + m = x·d − (−m), exactly
  }
  static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(Q4_1, qs);
    for (int j = 0; j < 16; ++j) q[j] = int8_t(qs[j] & 15), q[j + 16] = int8_t(qs[j] >> 4);
  }
  MOELSP_DECODER_COMMON
};

template <>
struct Decoder<DType::Q5_1> {
  static constexpr DType kType = DType::Q5_1;
  static constexpr int kElems = 32, kGroup = 32, kOffset = 0;
  static constexpr bool kMin = true;
  template <class H = ScalarHalf>
  static void scales(const uint8_t* b, float* scale, float* min) {
    scale[0] = H::at(b + offsetof(Q5_1, d));
    min[0] = -H::at(b + offsetof(Q5_1, m));
  }
  static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(Q5_1, qs);
    const uint32_t qh = detail::u32_at(b + offsetof(Q5_1, qh));
    for (int j = 0; j < 16; ++j) {
      q[j] = int8_t((qs[j] & 15) | (((qh >> j) & 1) << 4));
      q[j + 16] = int8_t((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
    }
  }
  MOELSP_DECODER_COMMON
};

template <>
struct Decoder<DType::Q2_K> {
  // Weight e = 128h + 32j + l: bits 2j.. of qs[32h + l]; group e / 16.
  static constexpr DType kType = DType::Q2_K;
  static constexpr int kElems = 256, kGroup = 16, kOffset = 0;
  static constexpr bool kMin = true;
  template <class H = ScalarHalf>
  static void scales(const uint8_t* b, float* scale, float* min) {
    const float d = H::at(b + offsetof(Q2_K, d)), dmin = H::at(b + offsetof(Q2_K, dmin));
    for (int g = 0; g < 16; ++g) {
      const uint8_t sc = b[offsetof(Q2_K, scales) + size_t(g)];
      scale[g] = d * float(sc & 15);
      min[g] = dmin * float(sc >> 4);
    }
  }
  static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(Q2_K, qs);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l) q[128 * h + 32 * j + l] = int8_t((qs[32 * h + l] >> (2 * j)) & 3);
  }
  MOELSP_DECODER_COMMON
};

template <>
struct Decoder<DType::Q3_K> {
  // Q2_K's 2-bit layout; the value is q − 4 unless bit 4h + j of hmask[l] is
  // set; sixteen 6-bit scales (low nibbles in bytes 0-7, two high bits each in
  // bytes 8-11), stored + 32.
  static constexpr DType kType = DType::Q3_K;
  static constexpr int kElems = 256, kGroup = 16, kOffset = 4;
  static constexpr bool kMin = false;
  template <class H = ScalarHalf>
  static void scales(const uint8_t* b, float* scale, float*) {
    const uint8_t* sc = b + offsetof(Q3_K, scales);
    const float d = H::at(b + offsetof(Q3_K, d));
    for (int i = 0; i < 16; ++i) {
      const int low = i < 8 ? sc[i] & 15 : sc[i - 8] >> 4;
      const int high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
      scale[i] = d * float((low | (high << 4)) - 32);
    }
  }
  static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(Q3_K, qs);
    const uint8_t* hm = b + offsetof(Q3_K, hmask);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l)
          q[128 * h + 32 * j + l] = int8_t(((qs[32 * h + l] >> (2 * j)) & 3) - ((hm[l] >> (4 * h + j)) & 1 ? 0 : 4));
  }
  MOELSP_DECODER_COMMON
};

template <>
struct Decoder<DType::IQ4_NL> {
  static constexpr DType kType = DType::IQ4_NL;
  static constexpr int kElems = 32, kGroup = 32, kOffset = 128;
  static constexpr bool kMin = false;
  template <class H = ScalarHalf>
  static void scales(const uint8_t* b, float* scale, float*) {
    scale[0] = H::at(b + offsetof(IQ4_NL, d));
  }
  static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ4_NL, qs);
    for (int j = 0; j < 16; ++j) q[j] = kIq4nlValues[qs[j] & 15], q[j + 16] = kIq4nlValues[qs[j] >> 4];
  }
  MOELSP_DECODER_COMMON
};

template <>
struct Decoder<DType::IQ4_XS> {
  static constexpr DType kType = DType::IQ4_XS;
  static constexpr int kElems = 256, kGroup = 32, kOffset = 128;
  static constexpr bool kMin = false;
  template <class H = ScalarHalf>
  static void scales(const uint8_t* b, float* scale, float*) {
    const uint16_t sh = detail::u16_at(b + offsetof(IQ4_XS, scales_h));
    const float d = H::at(b + offsetof(IQ4_XS, d));
    for (int ib = 0; ib < 8; ++ib) {
      const int ls =
          ((b[offsetof(IQ4_XS, scales_l) + size_t(ib / 2)] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
      scale[ib] = d * float(ls - 32);
    }
  }
  static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ4_XS, qs);
    for (int ib = 0; ib < 8; ++ib)
      for (int j = 0; j < 16; ++j)
        q[32 * ib + j] = kIq4nlValues[qs[16 * ib + j] & 15], q[32 * ib + 16 + j] = kIq4nlValues[qs[16 * ib + j] >> 4];
  }
  MOELSP_DECODER_COMMON
};

template <>
struct Decoder<DType::IQ2_XXS> {
  // Per 32 weights two u32: four grid indices (bytes of the first), then four
  // 7-bit sign sets and a 4-bit scale (top nibble) in the second.
  static constexpr DType kType = DType::IQ2_XXS;
  static constexpr int kElems = 256, kGroup = 32, kOffset = 43;
  static constexpr bool kMin = false;
  template <class H = ScalarHalf>
  static void scales(const uint8_t* b, float* scale, float*) {
    const float d = H::at(b + offsetof(IQ2_XXS, d));
    for (int ib = 0; ib < 8; ++ib)
      scale[ib] = d * (0.5f + float(detail::u32_at(b + offsetof(IQ2_XXS, qs) + 8 * ib + 4) >> 28)) * 0.25f;
  }
  static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ2_XXS, qs);
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t idx = detail::u32_at(qs + 8 * ib), aux = detail::u32_at(qs + 8 * ib + 4);
      for (int l = 0; l < 4; ++l)
        detail::signed8(iq::kIq2xxsGrid[(idx >> (8 * l)) & 255], iq::sign_byte((aux >> (7 * l)) & 127),
                        q + 32 * ib + 8 * l);
    }
  }
  MOELSP_DECODER_COMMON
};

template <>
struct Decoder<DType::IQ2_XS> {
  // Per 8 weights a u16: 9-bit grid index, 7 sign bits; a 4-bit scale per 16.
  static constexpr DType kType = DType::IQ2_XS;
  static constexpr int kElems = 256, kGroup = 16, kOffset = 43;
  static constexpr bool kMin = false;
  template <class H = ScalarHalf>
  static void scales(const uint8_t* b, float* scale, float*) {
    const float d = H::at(b + offsetof(IQ2_XS, d));
    for (int ib = 0; ib < 8; ++ib) detail::iq2_half_scales(d, b[offsetof(IQ2_XS, scales) + size_t(ib)], scale + 2 * ib);
  }
  static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ2_XS, qs);
    for (int k = 0; k < 32; ++k) {
      const uint16_t v = detail::u16_at(qs + 2 * k);
      detail::signed8(iq::kIq2xsGrid[v & 511], iq::sign_byte(v >> 9), q + 8 * k);
    }
  }
  MOELSP_DECODER_COMMON
};

template <>
struct Decoder<DType::IQ2_S> {
  // Per 8 weights: a grid index byte + 2 high bits from qh, a full sign byte.
  static constexpr DType kType = DType::IQ2_S;
  static constexpr int kElems = 256, kGroup = 16, kOffset = 43;
  static constexpr bool kMin = false;
  template <class H = ScalarHalf>
  static void scales(const uint8_t* b, float* scale, float*) {
    const float d = H::at(b + offsetof(IQ2_S, d));
    for (int ib = 0; ib < 8; ++ib) detail::iq2_half_scales(d, b[offsetof(IQ2_S, scales) + size_t(ib)], scale + 2 * ib);
  }
  static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ2_S, qs);
    const uint8_t* signs = qs + 32;
    const uint8_t* qh = b + offsetof(IQ2_S, qh);
    for (int ib = 0; ib < 8; ++ib)
      for (int l = 0; l < 4; ++l) {
        const uint32_t idx = qs[4 * ib + l] | ((uint32_t(qh[ib]) << (8 - 2 * l)) & 0x300);
        detail::signed8(iq::kIq2sGrid[idx], signs[4 * ib + l], q + 32 * ib + 8 * l);
      }
  }
  MOELSP_DECODER_COMMON
};

template <>
struct Decoder<DType::IQ3_XXS> {
  // 64 grid index bytes (4 weights each), then per 32 weights a u32 of four
  // 7-bit sign sets and a 4-bit scale.
  static constexpr DType kType = DType::IQ3_XXS;
  static constexpr int kElems = 256, kGroup = 32, kOffset = 62;
  static constexpr bool kMin = false;
  template <class H = ScalarHalf>
  static void scales(const uint8_t* b, float* scale, float*) {
    const float d = H::at(b + offsetof(IQ3_XXS, d));
    for (int ib = 0; ib < 8; ++ib)
      scale[ib] = d * (0.5f + float(detail::u32_at(b + offsetof(IQ3_XXS, qs) + 64 + 4 * ib) >> 28)) * 0.5f;
  }
  static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ3_XXS, qs);
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t aux = detail::u32_at(qs + 64 + 4 * ib);
      for (int l = 0; l < 4; ++l) {
        const uint32_t s = iq::sign_byte((aux >> (7 * l)) & 127);
        int8_t* out = q + 32 * ib + 8 * l;
        detail::signed4(iq::kIq3xxsGrid[qs[8 * ib + 2 * l]], s, out);
        detail::signed4(iq::kIq3xxsGrid[qs[8 * ib + 2 * l + 1]], s >> 4, out + 4);
      }
    }
  }
  MOELSP_DECODER_COMMON
};

template <>
struct Decoder<DType::IQ3_S> {
  // Per 4 weights a grid index byte + a ninth bit from qh; sign bytes; a
  // 4-bit scale per 32 (odd: 1 + 2s).
  static constexpr DType kType = DType::IQ3_S;
  static constexpr int kElems = 256, kGroup = 32, kOffset = 15;
  static constexpr bool kMin = false;
  template <class H = ScalarHalf>
  static void scales(const uint8_t* b, float* scale, float*) {
    const float d = H::at(b + offsetof(IQ3_S, d));
    for (int ib = 0; ib < 8; ++ib)
      scale[ib] = d * float(1 + 2 * ((b[offsetof(IQ3_S, scales) + size_t(ib / 2)] >> (4 * (ib % 2))) & 15));
  }
  static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ3_S, qs);
    const uint8_t* qh = b + offsetof(IQ3_S, qh);
    const uint8_t* signs = b + offsetof(IQ3_S, signs);
    for (int ib = 0; ib < 8; ++ib)
      for (int l = 0; l < 4; ++l) {
        const uint32_t i1 = qs[8 * ib + 2 * l] | ((uint32_t(qh[ib]) << (8 - 2 * l)) & 256);
        const uint32_t i2 = qs[8 * ib + 2 * l + 1] | ((uint32_t(qh[ib]) << (7 - 2 * l)) & 256);
        const uint32_t s = signs[4 * ib + l];
        int8_t* out = q + 32 * ib + 8 * l;
        detail::signed4(iq::kIq3sGrid[i1], s, out);
        detail::signed4(iq::kIq3sGrid[i2], s >> 4, out + 4);
      }
  }
  MOELSP_DECODER_COMMON
};

template <>
struct Decoder<DType::IQ1_S> {
  // Per 32 weights a u16: four 3-bit index extensions, a 3-bit scale, the
  // delta's sign. Weight = dl·(grid ± 1/8) = (dl/8)·(8·grid ± 1).
  static constexpr DType kType = DType::IQ1_S;
  static constexpr int kElems = 256, kGroup = 32, kOffset = 9;
  static constexpr bool kMin = false;
  template <class H = ScalarHalf>
  static void scales(const uint8_t* b, float* scale, float*) {
    const float d = H::at(b + offsetof(IQ1_S, d));
    for (int ib = 0; ib < 8; ++ib) {
      const uint16_t h = detail::u16_at(b + offsetof(IQ1_S, qh) + 2 * size_t(ib));
      scale[ib] = d * float(2 * ((h >> 12) & 7) + 1) * 0.125f;
    }
  }
  static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ1_S, qs);
    for (int ib = 0; ib < 8; ++ib) {
      const uint16_t h = detail::u16_at(b + offsetof(IQ1_S, qh) + 2 * size_t(ib));
      const int delta = h & 0x8000 ? -1 : 1;
      for (int l = 0; l < 4; ++l)
        detail::iq1_eight(iq::kIq1sGrid[qs[4 * ib + l] | (((h >> (3 * l)) & 7) << 8)], delta, q + 32 * ib + 8 * l);
    }
  }
  MOELSP_DECODER_COMMON
};

template <>
struct Decoder<DType::IQ1_M> {
  // IQ1_S's grid with a 3-bit scale per 16 weights and a delta sign per 8; the
  // fp16 super-block scale is the top nibbles of the four u16 scale words.
  static constexpr DType kType = DType::IQ1_M;
  static constexpr int kElems = 256, kGroup = 16, kOffset = 9;
  static constexpr bool kMin = false;
  template <class H = ScalarHalf>
  static void scales(const uint8_t* b, float* scale, float*) {
    uint16_t sc[4];
    std::memcpy(sc, b + offsetof(IQ1_M, scales), 8);
    const auto dbits = uint16_t((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    const float d = H::from_bits(dbits);
    for (int ib = 0; ib < 8; ++ib) {
      scale[2 * ib] = d * float(2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1) * 0.125f;
      scale[2 * ib + 1] = d * float(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1) * 0.125f;
    }
  }
  static void values(const uint8_t* b, int8_t* q) {
    const uint8_t* qs = b + offsetof(IQ1_M, qs);
    const uint8_t* qh = b + offsetof(IQ1_M, qh);
    for (int k = 0; k < 32; ++k) {  // 8 weights each: index byte k, qh byte k / 2 (low nibble for even k)
      const uint8_t h = qh[k / 2];
      const uint32_t idx = qs[k] | ((uint32_t(h) << (k % 2 ? 4 : 8)) & 0x700);
      detail::iq1_eight(iq::kIq1sGrid[idx], h & (k % 2 ? 0x80 : 0x08) ? -1 : 1, q + 8 * k);
    }
  }
  MOELSP_DECODER_COMMON
};
#undef MOELSP_DECODER_COMMON

// Whether decode_blocks.h defines type t, and the call for a runtime type.
constexpr bool is_decoded(DType t) {
  switch (t) {
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ1_S:
    case DType::IQ1_M: return true;
    default: return false;
  }
}

// Calls f(Decoder<T>{}) for the decoded type t (is_decoded(t) must hold).
template <class F>
decltype(auto) with_decoder(DType t, F&& f) {
  switch (t) {
    case DType::Q4_1: return f(Decoder<DType::Q4_1>{});
    case DType::Q5_1: return f(Decoder<DType::Q5_1>{});
    case DType::Q2_K: return f(Decoder<DType::Q2_K>{});
    case DType::Q3_K: return f(Decoder<DType::Q3_K>{});
    case DType::IQ4_NL: return f(Decoder<DType::IQ4_NL>{});
    case DType::IQ4_XS: return f(Decoder<DType::IQ4_XS>{});
    case DType::IQ2_XXS: return f(Decoder<DType::IQ2_XXS>{});
    case DType::IQ2_XS: return f(Decoder<DType::IQ2_XS>{});
    case DType::IQ2_S: return f(Decoder<DType::IQ2_S>{});
    case DType::IQ3_XXS: return f(Decoder<DType::IQ3_XXS>{});
    case DType::IQ3_S: return f(Decoder<DType::IQ3_S>{});
    case DType::IQ1_S: return f(Decoder<DType::IQ1_S>{});
    default: return f(Decoder<DType::IQ1_M>{});
  }
}

}  // namespace moelsp::kernels::blocks
