// Scalar reference of the int8-activation path (kernels/cpu/matmul_int8.cpp).
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "../decode_blocks.h"
#include "../quant_blocks.h"
#include "kernels/convert.h"
#include "kernels/matmul.h"

namespace moelsp::kernels::ref {

void quantize_row_q8(const float* x, BlockQ8* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    out[b].d = d;
    // Round half away from zero, computed in f32 as the SIMD path does it.
    for (int i = 0; i < 32; ++i) {
      const float v = x[b * 32 + i] * id;
      out[b].q[i] = int8_t(std::trunc(v + std::copysign(0.5f, v)));
    }
  }
}

void quantize_row_q8_k(const float* x, BlockQ8K* out, int64_t n) {
  // llama.cpp's Q8_K rounding (so our logits track its K-quant results): the
  // value of largest magnitude maps to −127, the others round half to even.
  for (int64_t b = 0; b < n / 256; ++b) {
    float amax = 0, max = 0;
    for (int i = 0; i < 256; ++i)
      if (std::fabs(x[b * 256 + i]) > amax) amax = std::fabs(x[b * 256 + i]), max = x[b * 256 + i];
    const float iscale = amax > 0 ? -127.0f / max : 0.0f;
    out[b].d = amax > 0 ? 1.0f / iscale : 0.0f;
    for (int i = 0; i < 256; ++i) out[b].q[i] = int8_t(std::min(127.0f, std::nearbyint(iscale * x[b * 256 + i])));
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += out[b].q[16 * g + i];
      out[b].bsums[g] = int16_t(s);
    }
  }
}

namespace {

double dot_q8_0(const uint8_t* w, const BlockQ8* x, int64_t nb) {
  double sum = 0;
  for (int64_t b = 0; b < nb; ++b, w += sizeof(blocks::Q8_0)) {
    int32_t isum = 0;
    for (int k = 0; k < 32; ++k) isum += int32_t(int8_t(w[2 + k])) * x[b].q[k];
    sum += double(blocks::half_at(w)) * double(x[b].d) * double(isum);
  }
  return sum;
}

// Q4_0 / Q5_0: x = d·(q − 8) or d·(q − 16), 32-value blocks (layout: ref/matmul.cpp).
double dot_q4_0_q5_0(const uint8_t* w, const BlockQ8* x, int64_t nb, bool five) {
  double sum = 0;
  for (int64_t b = 0; b < nb; ++b, w += five ? sizeof(blocks::Q5_0) : sizeof(blocks::Q4_0)) {
    uint32_t qh = 0;
    if (five) std::memcpy(&qh, w + 2, 4);
    const uint8_t* qs = w + (five ? 6 : 2);
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      int lo = qs[j] & 15, hi = qs[j] >> 4;
      if (five) lo |= int((qh >> j) & 1) << 4, hi |= int((qh >> (j + 16)) & 1) << 4;
      const int off = five ? 16 : 8;
      isum += (lo - off) * x[b].q[j] + (hi - off) * x[b].q[j + 16];
    }
    sum += double(blocks::half_at(w)) * double(x[b].d) * double(isum);
  }
  return sum;
}

// MXFP4: x = 2^(e − 128) · kMxfp4Values[code], 32-value blocks (layout: ref/matmul.cpp).
double dot_mxfp4(const uint8_t* w, const BlockQ8* x, int64_t nb) {
  double sum = 0;
  for (int64_t b = 0; b < nb; ++b, w += sizeof(blocks::MXFP4)) {
    const uint8_t* qs = w + offsetof(blocks::MXFP4, qs);
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j)
      isum += blocks::kMxfp4Values[qs[j] & 15] * x[b].q[j] + blocks::kMxfp4Values[qs[j] >> 4] * x[b].q[j + 16];
    sum += double(blocks::e8m0_half(w[offsetof(blocks::MXFP4, e)])) * double(x[b].d) * double(isum);
  }
  return sum;
}

// Q4_K / Q5_K: x = d·scale·q − dmin·min per 32-value sub-block, q in [0, 15]
// (Q5_K: + 16 where bit `sub` of qh[l] is set).
double dot_q4_k_q5_k(const uint8_t* w, const BlockQ8K* x, int64_t nb, bool five) {
  double sum = 0;
  for (int64_t b = 0; b < nb; ++b, w += five ? sizeof(blocks::Q5_K) : sizeof(blocks::Q4_K)) {
    const uint8_t* qs = w + (five ? 48 : 16);
    const uint8_t* qh = w + 16;
    int64_t isum = 0, msum = 0;
    for (int sub = 0; sub < 8; ++sub) {
      int scale, min;
      blocks::k4_scale_min(w + 4, sub, &scale, &min);
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) {
        int q = (qs[32 * (sub / 2) + l] >> (4 * (sub % 2))) & 15;
        if (five && ((qh[l] >> sub) & 1)) q += 16;
        s += q * x[b].q[32 * sub + l];
      }
      isum += int64_t(scale) * s;
      msum += int64_t(min) * (x[b].bsums[2 * sub] + x[b].bsums[2 * sub + 1]);
    }
    sum += double(x[b].d) * (double(blocks::half_at(w)) * double(isum) - double(blocks::half_at(w + 2)) * double(msum));
  }
  return sum;
}

// Q6_K: x = d·scale·(q − 32) per 16-value group, q in [0, 63].
double dot_q6_k(const uint8_t* w, const BlockQ8K* x, int64_t nb) {
  double sum = 0;
  for (int64_t b = 0; b < nb; ++b, w += sizeof(blocks::Q6_K)) {
    const auto* scales = reinterpret_cast<const int8_t*>(w + 192);
    int64_t isum = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = w + 64 * half;
      const uint8_t* qh = w + 128 + 32 * half;
      const int8_t* q = x[b].q + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = 8 * half + l / 16;
        const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        isum += int64_t(scales[is]) * q1 * q[l] + int64_t(scales[is + 2]) * q2 * q[l + 32] +
                int64_t(scales[is + 4]) * q3 * q[l + 64] + int64_t(scales[is + 6]) * q4 * q[l + 96];
      }
    }
    sum += double(blocks::half_at(w + offsetof(blocks::Q6_K, d))) * double(x[b].d) * double(isum);
  }
  return sum;
}

// The types of decode_blocks.h: the weight row as ref::dequantize_row gives
// it, against the quantized activations (d · q), summed in double.
void matmul_int8_decoded(const MatmulArgs& a) {
  const int elems = blocks::with_decoder(a.w.type, [](auto d) { return decltype(d)::kElems; });
  const int64_t nb = a.w.cols / elems;
  std::vector<BlockQ8> xq(elems == 32 ? size_t(nb) : 0);
  std::vector<BlockQ8K> xk(elems == 256 ? size_t(nb) : 0);
  std::vector<float> w(size_t(a.w.cols));
  for (int64_t i = 0; i < a.m; ++i) {
    if (elems == 256) quantize_row_q8_k(a.x + i * a.ldx, xk.data(), a.w.cols);
    else quantize_row_q8(a.x + i * a.ldx, xq.data(), a.w.cols);
    for (int64_t r = a.row_begin; r < a.row_end; ++r) {
      ref::dequantize_row(a.w.type, a.w.row(r), w.data(), a.w.cols);
      double v = 0;
      for (int64_t c = 0; c < a.w.cols; ++c) {
        const double x = elems == 256 ? double(xk[size_t(c / 256)].d) * xk[size_t(c / 256)].q[c % 256]
                                      : double(xq[size_t(c / 32)].d) * xq[size_t(c / 32)].q[c % 32];
        v += double(w[size_t(c)]) * x;
      }
      a.y[i * a.ldy + r] = float(v);
    }
  }
}

}  // namespace

void matmul_int8(const MatmulArgs& a) {
  if (blocks::is_decoded(a.w.type)) return matmul_int8_decoded(a);
  const bool k = a.w.type == DType::Q4_K || a.w.type == DType::Q5_K || a.w.type == DType::Q6_K;
  const int64_t nb = a.w.cols / (k ? 256 : 32);
  std::vector<BlockQ8> xq(k ? 0 : static_cast<size_t>(nb));
  std::vector<BlockQ8K> xk(k ? static_cast<size_t>(nb) : 0);
  for (int64_t i = 0; i < a.m; ++i) {
    if (k) quantize_row_q8_k(a.x + i * a.ldx, xk.data(), a.w.cols);
    else quantize_row_q8(a.x + i * a.ldx, xq.data(), a.w.cols);
    for (int64_t r = a.row_begin; r < a.row_end; ++r) {
      double v = 0;
      switch (a.w.type) {
        case DType::Q8_0: v = dot_q8_0(a.w.row(r), xq.data(), nb); break;
        case DType::Q4_0: v = dot_q4_0_q5_0(a.w.row(r), xq.data(), nb, false); break;
        case DType::Q5_0: v = dot_q4_0_q5_0(a.w.row(r), xq.data(), nb, true); break;
        case DType::Q4_K: v = dot_q4_k_q5_k(a.w.row(r), xk.data(), nb, false); break;
        case DType::Q5_K: v = dot_q4_k_q5_k(a.w.row(r), xk.data(), nb, true); break;
        case DType::Q6_K: v = dot_q6_k(a.w.row(r), xk.data(), nb); break;
        case DType::MXFP4: v = dot_mxfp4(a.w.row(r), xq.data(), nb); break;
        default: throw std::invalid_argument("ref::matmul_int8: a type with an int8 kernel (kernels/types.h) only");
      }
      a.y[i * a.ldy + r] = float(v);
    }
  }
}

}  // namespace moelsp::kernels::ref
