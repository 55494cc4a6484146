// Naive reference matmul: dequantize each weight row to f32, then a plain dot
// product in double precision. The oracle for kernels/cpu/matmul.cpp.
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "../decode_blocks.h"
#include "../quant_blocks.h"
#include "kernels/convert.h"
#include "kernels/matmul.h"

namespace moelsp::kernels::ref {

using blocks::half_at;

namespace {

// x = d · q
void dequantize_q8_0(const uint8_t* b, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 32, b += sizeof(blocks::Q8_0)) {
    const float d = half_at(b + offsetof(blocks::Q8_0, d));
    const auto* q = reinterpret_cast<const int8_t*>(b + offsetof(blocks::Q8_0, qs));
    for (int j = 0; j < 32; ++j) dst[i + j] = d * float(q[j]);
  }
}

// Element j in the low nibble of qs[j], element j + 16 in its high nibble; x = d·(q − 8).
void dequantize_q4_0(const uint8_t* b, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 32, b += sizeof(blocks::Q4_0)) {
    const float d = half_at(b + offsetof(blocks::Q4_0, d));
    const uint8_t* qs = b + offsetof(blocks::Q4_0, qs);
    for (int j = 0; j < 16; ++j) {
      dst[i + j] = d * float((qs[j] & 0x0f) - 8);
      dst[i + j + 16] = d * float((qs[j] >> 4) - 8);
    }
  }
}

// As Q4_0 with each element's fifth bit in qh (u32 LE, bit j for element j); x = d·(q − 16).
void dequantize_q5_0(const uint8_t* b, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 32, b += sizeof(blocks::Q5_0)) {
    const float d = half_at(b + offsetof(blocks::Q5_0, d));
    uint32_t qh;
    std::memcpy(&qh, b + offsetof(blocks::Q5_0, qh), 4);
    const uint8_t* qs = b + offsetof(blocks::Q5_0, qs);
    for (int j = 0; j < 16; ++j) {
      const int lo = (qs[j] & 0x0f) | int(((qh >> j) & 1) << 4);
      const int hi = (qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
      dst[i + j] = d * float(lo - 16);
      dst[i + j + 16] = d * float(hi - 16);
    }
  }
}

// 256-element super-blocks of eight 32-element sub-blocks, each with a 6-bit
// (scale, min) pair; the nibbles hold 64 elements per 32 bytes (low nibbles
// first, then high); Q5_K adds each element's fifth bit. x = d·scale·q − dmin·min.
template <bool kFive>
void dequantize_q4_k(const uint8_t* b, float* dst, int64_t n) {
  using Block = std::conditional_t<kFive, blocks::Q5_K, blocks::Q4_K>;
  for (int64_t i = 0; i < n; i += 256, b += sizeof(Block)) {
    const float d = half_at(b + offsetof(Block, d)), dmin = half_at(b + offsetof(Block, dmin));
    const uint8_t* sc = b + offsetof(Block, scales);
    const uint8_t* qh = b + offsetof(blocks::Q5_K, qh);  // Q5_K only
    const uint8_t* qs = b + offsetof(Block, qs);
    float* y = dst + i;
    for (int sub = 0; sub < 8; ++sub) {
      int scale, min;
      blocks::k4_scale_min(sc, sub, &scale, &min);
      const uint8_t* q = qs + 32 * (sub / 2);
      const int shift = (sub % 2) * 4;
      for (int l = 0; l < 32; ++l) {
        int v = (q[l] >> shift) & 0x0f;
        if (kFive && (qh[l] >> sub) & 1) v += 16;
        y[32 * sub + l] = d * float(scale) * float(v) - dmin * float(min);
      }
    }
  }
}

// 256-element super-blocks in two halves of 128: low nibbles in ql, 2-bit
// highs in qh, an int8 scale per 16 elements. x = d·scale·(q − 32).
void dequantize_q6_k(const uint8_t* b, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 256, b += sizeof(blocks::Q6_K)) {
    const float d = half_at(b + offsetof(blocks::Q6_K, d));
    const auto* scales = reinterpret_cast<const int8_t*>(b + offsetof(blocks::Q6_K, scales));
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = b + offsetof(blocks::Q6_K, ql) + 64 * half;
      const uint8_t* qh = b + offsetof(blocks::Q6_K, qh) + 32 * half;
      const int8_t* s = scales + 8 * half;
      float* y = dst + i + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(s[is]) * float(q1);
        y[l + 32] = d * float(s[is + 2]) * float(q2);
        y[l + 64] = d * float(s[is + 4]) * float(q3);
        y[l + 96] = d * float(s[is + 6]) * float(q4);
      }
    }
  }
}

// MXFP4: x = kMxfp4Values[code] · 2^(e − 128), nibbles laid out as Q4_0's. The
// product of a small integer and a power of two, in f32 as ggml's
// dequantize_row_mxfp4 computes it (bit-identical, subnormals and inf included).
void dequantize_mxfp4(const uint8_t* b, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 32, b += sizeof(blocks::MXFP4)) {
    const float d = blocks::e8m0_half(b[offsetof(blocks::MXFP4, e)]);
    const uint8_t* qs = b + offsetof(blocks::MXFP4, qs);
    for (int j = 0; j < 16; ++j) {
      dst[i + j] = float(blocks::kMxfp4Values[qs[j] & 0x0f]) * d;
      dst[i + j + 16] = float(blocks::kMxfp4Values[qs[j] >> 4]) * d;
    }
  }
}

// The types of decode_blocks.h: integers and a scale (and min) per group, then
// scale·q − min in f32, as ggml's dequantize_row_* writes each of them.
template <class D>
void dequantize_decoded(const uint8_t* b, float* dst, int64_t n) {
  int8_t q[D::kElems];
  float scale[D::kElems / D::kGroup], min[D::kElems / D::kGroup];
  for (int64_t i = 0; i < n; i += D::kElems, b += traits(D::kType).type_size) {
    D::decode(b, q, scale, min);
    for (int e = 0; e < D::kElems; ++e) {
      const float v = scale[e / D::kGroup] * float(q[e]);
      dst[i + e] = D::kMin ? v - min[e / D::kGroup] : v;
    }
  }
}

}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(src);
  const auto* h = static_cast<const uint16_t*>(src);
  switch (t) {
    case DType::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = kernels::fp16_to_fp32(h[i]);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = kernels::bf16_to_fp32(h[i]);
      return;
    case DType::Q8_0: return dequantize_q8_0(b, dst, n);
    case DType::Q4_0: return dequantize_q4_0(b, dst, n);
    case DType::Q5_0: return dequantize_q5_0(b, dst, n);
    case DType::Q4_K: return dequantize_q4_k<false>(b, dst, n);
    case DType::Q5_K: return dequantize_q4_k<true>(b, dst, n);
    case DType::Q6_K: return dequantize_q6_k(b, dst, n);
    case DType::MXFP4: return dequantize_mxfp4(b, dst, n);
    default:
      if (blocks::is_decoded(t))
        return blocks::with_decoder(t, [&](auto d) { dequantize_decoded<decltype(d)>(b, dst, n); });
      throw std::invalid_argument(std::string("dequantize_row: unsupported type ") + std::string(dtype_name(t)));
  }
}

void matmul(const MatmulArgs& a) {
  std::vector<float> row(size_t(a.w.cols));
  for (int64_t r = a.row_begin; r < a.row_end; ++r) {
    ref::dequantize_row(a.w.type, a.w.row(r), row.data(), a.w.cols);
    for (int64_t i = 0; i < a.m; ++i) {
      const float* x = a.x + i * a.ldx;
      double acc = 0;
      for (int64_t c = 0; c < a.w.cols; ++c) acc += double(row[size_t(c)]) * double(x[c]);
      a.y[i * a.ldy + r] = float(acc);
    }
  }
}

void weighted_rows(const WeightedRowsArgs& a) {
  std::vector<float> q8;  // Q8_0 values: the rows dequantized, n apart
  if (a.v_q8) {
    q8.resize(size_t(a.n_v) * size_t(a.n));
    for (int64_t j = 0; j < a.n_v; ++j)
      ref::dequantize_row(DType::Q8_0, a.v_q8 + size_t(j) * a.v_q8_stride, q8.data() + size_t(j) * size_t(a.n), a.n);
  }
  for (int64_t i = 0; i < a.m; ++i)
    for (int64_t c = 0; c < a.n; ++c) {
      double s = a.accumulate ? double(a.y[i * a.ldy + c]) : 0.0;
      for (int64_t j = 0; j < a.n_v; ++j) {
        const float v = a.v_q8     ? q8[size_t(j * a.n + c)]
                        : a.v_f16  ? kernels::fp16_to_fp32(a.v_f16[j * a.ldv + c])
                        : a.v_bf16 ? kernels::bf16_to_fp32(a.v_bf16[j * a.ldv + c])
                                   : a.v[j * a.ldv + c];
        s += double(a.p[i * a.ldp + j]) * double(v);
      }
      a.y[i * a.ldy + c] = float(s);
    }
}

void scores(const ScoresArgs& a) {
  std::vector<float> k(size_t(a.hd));
  for (int64_t j = 0; j < a.n; ++j) {
    ref::dequantize_row(a.k_type, static_cast<const uint8_t*>(a.k) + size_t(j) * a.k_stride, k.data(), a.hd);
    for (int64_t i = 0; i < a.m; ++i) {
      double s = 0;
      for (int64_t c = 0; c < a.hd; ++c) s += double(a.q[i * a.ldq + c]) * double(k[size_t(c)]);
      a.s[i * a.lds + j] = float(s);
    }
  }
}
}  // namespace moelsp::kernels::ref
