// The GGUF block layouts the kernels compute with, and helpers shared by the
// reference and SIMD block decoders (internal to kernels/). The layouts are
// ggml's (block_q8_0, block_q4_K, …), which the file format fixes; each
// size is checked against the type table (kernels/types.h), and code steps
// through rows by sizeof(blocks::X) and reads fields at offsetof(blocks::X, f)
// instead of repeating the numbers. Scales are fp16 (half_at reads them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/convert.h"
#include "kernels/types.h"

namespace moelsp::kernels::blocks {

struct Q8_0 {  // value = d · qs[i]
  uint16_t d;
  int8_t qs[32];
};
struct Q4_0 {  // value = d · (nibble − 8); element j in the low nibble of qs[j], j + 16 in the high one
  uint16_t d;
  uint8_t qs[16];
};
struct Q5_0 {  // as Q4_0, with each value's fifth bit in qh (bit j of the 32)
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct Q4_K {  // 8 sub-blocks of 32: value = d · scale · nibble − dmin · min (6-bit scales and mins)
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct Q5_K {  // as Q4_K, with each value's fifth bit in qh
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct Q6_K {  // 16 sub-blocks of 16: value = d · scale · (6-bit q − 32); low 4 bits in ql, high 2 in qh
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};

struct Q4_1 {  // value = d · nibble + m (Q4_0's nibble layout)
  uint16_t d, m;
  uint8_t qs[16];
};
struct Q5_1 {  // as Q4_1, with each value's fifth bit in qh (bit j of the 32)
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct Q2_K {  // 16 groups of 16: value = d · (scale & 15) · q − dmin · (scale >> 4), q 2 bits
  uint8_t scales[16];
  uint8_t qs[64];  // 2-bit values: byte l of each 32 holds groups at shifts 0, 2, 4, 6
  uint16_t d, dmin;
};
struct Q3_K {  // 16 groups of 16: value = d · (s − 32) · (q − 4·!hbit), q 2 bits, s 6 bits
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
struct IQ4_NL {  // value = d · kIq4nlValues[nibble] (Q4_0's nibble layout)
  uint16_t d;
  uint8_t qs[16];
};
struct IQ4_XS {  // 8 groups of 32: value = d · (ls − 32) · kIq4nlValues[nibble], ls 6 bits
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
// The i-quants (IQ1_S … IQ3_S) store indices into fixed codebooks of 8 or 4
// values (kernels/iq_grids.h) with separate sign bits; decode_blocks.h reads them.
struct IQ2_XXS {
  uint16_t d;
  uint16_t qs[32];
};
struct IQ2_XS {
  uint16_t d;
  uint16_t qs[32];
  uint8_t scales[8];
};
struct IQ2_S {
  uint16_t d;
  uint8_t qs[64];  // 32 grid index low bytes, then 32 sign bytes
  uint8_t qh[8];
  uint8_t scales[8];
};
struct IQ3_XXS {
  uint16_t d;
  uint8_t qs[96];  // 64 grid indices, then 8 × u32 scale-and-signs
};
struct IQ3_S {
  uint16_t d;
  uint8_t qs[64];
  uint8_t qh[8];
  uint8_t signs[32];
  uint8_t scales[4];
};
struct IQ1_S {
  uint16_t d;
  uint8_t qs[32];
  uint16_t qh[8];
};
struct IQ1_M {  // the fp16 super-block scale is spread over the top nibbles of the four u16 scale words
  uint8_t qs[32];
  uint8_t qh[16];
  uint8_t scales[8];
};
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// MXFP4 (OCP microscaling FP4): value = kMxfp4Values[code] · 2^(e − 128), e an
// e8m0 exponent byte, codes e2m1 (sign, 2-bit exponent, 1-bit mantissa) in the
// same nibble layout as Q4_0 (element j low, j + 16 high). The table is the
// e2m1 values doubled (ggml's kvalues_mxfp4), hence 2^(e − 128), not 2^(e − 127).
struct MXFP4 {
  uint8_t e;
  uint8_t qs[16];
};
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static_assert(sizeof(Q8_0) == traits(DType::Q8_0).type_size);
static_assert(sizeof(Q4_0) == traits(DType::Q4_0).type_size);
static_assert(sizeof(Q5_0) == traits(DType::Q5_0).type_size);
static_assert(sizeof(Q4_K) == traits(DType::Q4_K).type_size);

// Q4_K repacked at load (kernels/repack.h): one super-block of 256 columns
// for 16 rows, laid out for vpdpbusd with one row per 32-bit lane. qs[j][t]
// is one 64-byte vector: lane r, byte b holds row r's weight 64j + 4t + b in
// its low nibble and 64j + 32 + 4t + b in its high one, so each of the 8
// vectors of a sub-block pair meets one 4-byte broadcast of the activations.
// Scales and mins are unpacked from their 6-bit packing into bytes ([sub][row]
// and [pair][row][2], the int16 pairs vpdpwssd takes), 2.8 % more bytes than
// 16 plain Q4_K blocks, for no per-block unpacking.
struct Q4_Kx16 {
  uint16_t d[16], dmin[16];
  uint8_t scales[8][16];
  uint8_t mins[4][16][2];
  uint8_t qs[4][8][16][4];
};
static_assert(sizeof(Q4_Kx16) == 2368 && sizeof(Q4_Kx16) == 16 * sizeof(Q4_K) + 64);

// Q6_K repacked the same way, in exactly 16 plain blocks' bytes. Values go
// in chunks of 4 (chunk c: values 4c..4c + 3), four chunks to a 16-value
// group g with its scale. q[g][0] holds chunk 4g in its low nibbles and
// 4g + 1 in its high ones, q[g][1] chunks 4g + 2 and 4g + 3; q[g][2] holds
// the two high bits of the four chunks at bits 0-1, 2-3, 4-5 and 6-7, so
// each reaches bits 4-5 by one shift. A group's three vectors are adjacent:
// with the high bits in a region of their own (2 KB on), one core streamed a
// 65536 × 2048 matrix from memory at 19.5 GB/s; adjacent, at 41 (the plain
// row kernel: 29).
// scales[p][row] = the scales of groups 2p and 2p + 1 (an int16 pair each
// for vpdpwssd).
struct Q6_Kx16 {
  uint16_t d[16];
  int8_t scales[8][16][2];
  uint8_t q[16][3][16][4];
};
static_assert(sizeof(Q6_Kx16) == 16 * sizeof(Q6_K));

// The 32-value types repacked: one block of 16 rows, chunk t (values 4t..4t + 3)
// of row r in lane r of vector t. Q8_0 stores q + 128 (vpdpbusd's unsigned
// side; the 128·Σx comes back from the input's block sum). Q4_0 keeps the file's
// bytes: vector t (t < 4) holds chunk t in its low nibbles and chunk t + 4 in
// its high ones. Q5_0 adds, per chunk t, the 64-bit lane-byte mask of the
// fifth bits (bit 4r + k: value 4t + k of row r), one masked byte add.
struct Q8_0x16 {
  uint16_t d[16];
  uint8_t q[8][16][4];
};
struct Q4_0x16 {
  uint16_t d[16];
  uint8_t q[4][16][4];
};
struct Q5_0x16 {
  uint16_t d[16];
  uint8_t q[4][16][4];
  uint64_t qh[8];
};
// Q4_1 / Q5_1 (d · q + m): as Q4_0 / Q5_0 with the 16 rows' mins after the scales.
struct Q4_1x16 {
  uint16_t d[16], m[16];
  uint8_t q[4][16][4];
};
struct Q5_1x16 {
  uint16_t d[16], m[16];
  uint8_t q[4][16][4];
  uint64_t qh[8];
};
static_assert(sizeof(Q8_0x16) == 16 * sizeof(Q8_0) && sizeof(Q4_0x16) == 16 * sizeof(Q4_0) &&
              sizeof(Q5_0x16) == 16 * sizeof(Q5_0) && offsetof(Q5_0x16, qh) == 288);
static_assert(sizeof(Q4_1x16) == 16 * sizeof(Q4_1) && sizeof(Q5_1x16) == 16 * sizeof(Q5_1) &&
              offsetof(Q4_1x16, q) == 64 && offsetof(Q5_1x16, qh) == 320);

// Sets Q6_K value v (0..255) of a block to q (0..63): its low 4 bits in ql, high 2 in qh (ggml's order).
inline void q6_k_set_value(Q6_K& b, int v, int q) {
  const int n = v / 128, j = (v % 128) / 32, l = v % 32;
  uint8_t& lo = b.ql[64 * n + l + 32 * (j & 1)];
  const int ls = 4 * (j >> 1);
  lo = uint8_t((lo & ~(15 << ls)) | (q & 15) << ls);
  uint8_t& hi = b.qh[32 * n + l];
  hi = uint8_t((hi & ~(3 << (2 * j))) | ((q >> 4) & 3) << (2 * j));
}

static_assert(sizeof(Q5_K) == traits(DType::Q5_K).type_size);
static_assert(sizeof(Q6_K) == traits(DType::Q6_K).type_size);
static_assert(sizeof(Q4_1) == traits(DType::Q4_1).type_size && sizeof(Q5_1) == traits(DType::Q5_1).type_size);
static_assert(sizeof(Q2_K) == traits(DType::Q2_K).type_size && sizeof(Q3_K) == traits(DType::Q3_K).type_size);
static_assert(sizeof(IQ4_NL) == traits(DType::IQ4_NL).type_size && sizeof(IQ4_XS) == traits(DType::IQ4_XS).type_size);
static_assert(sizeof(IQ2_XXS) == traits(DType::IQ2_XXS).type_size && sizeof(IQ2_XS) == traits(DType::IQ2_XS).type_size);
static_assert(sizeof(IQ2_S) == traits(DType::IQ2_S).type_size && sizeof(IQ3_XXS) == traits(DType::IQ3_XXS).type_size);
static_assert(sizeof(IQ3_S) == traits(DType::IQ3_S).type_size && sizeof(IQ1_S) == traits(DType::IQ1_S).type_size);
static_assert(sizeof(IQ1_M) == traits(DType::IQ1_M).type_size);
static_assert(sizeof(MXFP4) == traits(DType::MXFP4).type_size && offsetof(MXFP4, qs) == 1);
static_assert(offsetof(Q4_K, qs) == 16 && offsetof(Q5_K, qh) == 16 && offsetof(Q5_K, qs) == 48);
static_assert(offsetof(Q6_K, qh) == 128 && offsetof(Q6_K, scales) == 192 && offsetof(Q6_K, d) == 208);

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// An MXFP4 block's scale 2^(e − 128) built from its f32 bits, as ggml's
// GGML_E8M0_TO_FP32_HALF: e ≥ 2 is the normal number with biased exponent
// e − 1; e = 0 and 1 are the subnormals 2^−128 and 2^−127. Exact for every
// byte; e = 255 is 2^127 (no NaN).
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : uint32_t(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block `sub` (0..7) packed in 12 bytes.
inline void k4_scale_min(const uint8_t* sc, int sub, int* scale, int* min) {
  if (sub < 4) {
    *scale = sc[sub] & 63;
    *min = sc[sub + 4] & 63;
  } else {
    *scale = (sc[sub + 4] & 0x0f) | ((sc[sub - 4] >> 6) << 4);
    *min = (sc[sub + 4] >> 4) | ((sc[sub] >> 6) << 4);
  }
}

// Q4_K's twelve scale bytes → eight 6-bit scales (bytes 0-7 of the result)
// and eight 6-bit mins (bytes 8-15), with 32-bit masks instead of a per-sub-block
// branch (the layout is k4_scale_min's).
inline void k4_unpack_scales(const uint8_t* sc, uint32_t out[4]) {
  uint32_t u[3];
  std::memcpy(u, sc, 12);
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kTop2 = 0x03030303;
  out[0] = u[0] & kLow6;                                          // scales 0-3
  out[1] = (u[2] & kLow4) | (((u[0] >> 6) & kTop2) << 4);         // scales 4-7
  out[2] = u[1] & kLow6;                                          // mins 0-3
  out[3] = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kTop2) << 4);  // mins 4-7
}

}  // namespace moelsp::kernels::blocks
