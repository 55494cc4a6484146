// GGUF block decoding written once for the host and the CUDA device: 32
// consecutive weights of a row at a time, in the f32 operations and order of
// the reference dequantizer (kernels/ref/matmul.cpp, itself ggml's), so a
// device kernel built on these is the reference's arithmetic. The same
// functions compile into every build as plain C++, and tests/test_kernels.cpp
// checks them bit for bit against the reference on the CPU, GPU or not.
//
// Why groups of 32: every type here has a scale per 16 or 32 weights and
// blocks of 32 or 256, so 32 values are one block (Q8_0, Q4_0, Q5_0), one
// sub-block (Q4_K, Q5_K) or two scale groups (Q6_K); a thread that decodes a
// group reads 8-26 contiguous bytes. No standard headers beyond <cstdint>
// (the device side has no <cstring>); byte-wise little-endian reads need no
// alignment.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MOELSP_HD __host__ __device__ __forceinline__
#else
#define MOELSP_HD inline
#endif

namespace moelsp::kernels::hd {

MOELSP_HD uint32_t u16_at(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8; }
MOELSP_HD uint32_t u32_at(const uint8_t* p) { return u16_at(p) | u16_at(p + 2) << 16; }

MOELSP_HD float from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

// IEEE half → float, exact (subnormals, infinities and NaN payloads included).
MOELSP_HD float half_to_float(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man · 2^-24, exact in f32
    const float v = float(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return from_bits(sign | 0x7f800000u | man << 13);
  return from_bits(sign | (exp + 112) << 23 | man << 13);
}
MOELSP_HD float bf16_to_float(uint32_t h) { return from_bits(h << 16); }

// The weight types these helpers decode (the ones the device path computes
// with; the others are dequantized on the host first).
enum class Type { F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K };

// Bytes and weights per block (F32/F16/BF16: a "block" of 32 values).
MOELSP_HD constexpr int block_bytes(Type t) {
  switch (t) {
    case Type::F32: return 128;
    case Type::F16:
    case Type::BF16: return 64;
    case Type::Q8_0: return 34;
    case Type::Q4_0: return 18;
    case Type::Q5_0: return 22;
    case Type::Q4_K: return 144;
    case Type::Q5_K: return 176;
    case Type::Q6_K: return 210;
  }
  return 0;
}
MOELSP_HD constexpr int block_elems(Type t) { return t == Type::Q4_K || t == Type::Q5_K || t == Type::Q6_K ? 256 : 32; }

// Op<T>::run(args…) for the compile-time Type of t: how host code reaches the
// templates below (and the device kernels built on them) from a runtime type.
template <template <Type> class Op, class... Args>
void with_type(Type t, Args... args) {
  switch (t) {
    case Type::F32: return Op<Type::F32>::run(args...);
    case Type::F16: return Op<Type::F16>::run(args...);
    case Type::BF16: return Op<Type::BF16>::run(args...);
    case Type::Q8_0: return Op<Type::Q8_0>::run(args...);
    case Type::Q4_0: return Op<Type::Q4_0>::run(args...);
    case Type::Q5_0: return Op<Type::Q5_0>::run(args...);
    case Type::Q4_K: return Op<Type::Q4_K>::run(args...);
    case Type::Q5_K: return Op<Type::Q5_K>::run(args...);
    case Type::Q6_K: return Op<Type::Q6_K>::run(args...);
  }
}

// Q4_K/Q5_K: sub-block `sub`'s 6-bit scale and min from the 12 scale bytes.
MOELSP_HD void k4_scale_min(const uint8_t* sc, int sub, int* scale, int* min) {
  if (sub < 4) {
    *scale = sc[sub] & 63;
    *min = sc[sub + 4] & 63;
  } else {
    *scale = (sc[sub + 4] & 0x0f) | ((sc[sub - 4] >> 6) << 4);
    *min = (sc[sub + 4] >> 4) | ((sc[sub] >> 6) << 4);
  }
}

// Weights 32·g … 32·g + 31 of the block at b (g < block_elems / 32) → out.
template <Type T>
MOELSP_HD void decode_group(const uint8_t* b, int g, float* out) {
  if constexpr (T == Type::F32) {
    for (int j = 0; j < 32; ++j) out[j] = from_bits(u32_at(b + 4 * j));
  } else if constexpr (T == Type::F16) {
    for (int j = 0; j < 32; ++j) out[j] = half_to_float(u16_at(b + 2 * j));
  } else if constexpr (T == Type::BF16) {
    for (int j = 0; j < 32; ++j) out[j] = bf16_to_float(u16_at(b + 2 * j));
  } else if constexpr (T == Type::Q8_0) {  // d, 32 int8
    const float d = half_to_float(u16_at(b));
    for (int j = 0; j < 32; ++j) out[j] = d * float(int8_t(b[2 + j]));
  } else if constexpr (T == Type::Q4_0) {  // d, 16 bytes: j low nibble, j + 16 high; q − 8
    const float d = half_to_float(u16_at(b));
    for (int j = 0; j < 16; ++j) {
      out[j] = d * float((b[2 + j] & 0x0f) - 8);
      out[j + 16] = d * float((b[2 + j] >> 4) - 8);
    }
  } else if constexpr (T == Type::Q5_0) {  // d, qh (bit j: weight j's fifth bit), 16 bytes as Q4_0; q − 16
    const float d = half_to_float(u16_at(b));
    const uint32_t qh = u32_at(b + 2);
    for (int j = 0; j < 16; ++j) {
      const int lo = (b[6 + j] & 0x0f) | int(((qh >> j) & 1) << 4);
      const int hi = (b[6 + j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      out[j] = d * float(lo - 16);
      out[j + 16] = d * float(hi - 16);
    }
  } else if constexpr (T == Type::Q4_K || T == Type::Q5_K) {
    // d, dmin, 12 scale bytes, [Q5_K: 32 qh bytes], 128 nibble bytes: sub-block g
    // is the low (g even) or high nibbles of bytes 32·(g/2) …; d·scale·q − dmin·min.
    constexpr bool kFive = T == Type::Q5_K;
    const float d = half_to_float(u16_at(b)), dmin = half_to_float(u16_at(b + 2));
    int scale, min;
    k4_scale_min(b + 4, g, &scale, &min);
    const uint8_t* qh = b + 16;
    const uint8_t* q = b + (kFive ? 48 : 16) + 32 * (g / 2);
    const int shift = (g % 2) * 4;
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> shift) & 0x0f;
      if (kFive && ((qh[l] >> g) & 1)) v += 16;
      out[l] = d * float(scale) * float(v) - dmin * float(min);
    }
  } else if constexpr (T == Type::Q6_K) {
    // 128 ql bytes, 64 qh bytes, 16 int8 scales, d. Group g: half g/4 of 128
    // weights, quarter g%4 of it: low (quarters 0, 1) or high nibbles (2, 3) of
    // ql[l] (0, 2) or ql[l + 32] (1, 3), qh's bits 2·quarter; scale per 16.
    const int half = g / 4, quarter = g % 4;
    const uint8_t* ql = b + 64 * half + (quarter % 2) * 32;
    const uint8_t* qh = b + 128 + 32 * half;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * half + 2 * quarter;
    const float d = half_to_float(u16_at(b + 208));
    const int nib = (quarter / 2) * 4, hb = 2 * quarter;
    for (int l = 0; l < 32; ++l) {
      const int q = (((ql[l] >> nib) & 0x0f) | (((qh[l] >> hb) & 3) << 4)) - 32;
      out[l] = d * float(sc[l / 16]) * float(q);
    }
  }
}

}  // namespace moelsp::kernels::hd
