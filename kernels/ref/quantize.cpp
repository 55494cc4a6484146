// Reference quantizers (scalar; quantizing is offline work).
#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "../quant_blocks.h"
#include "kernels/convert.h"
#include "quantize_k.h"

namespace moelsp::kernels {

namespace {
void put_half(uint8_t* p, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}
// The element of largest magnitude, with its sign (llama.cpp's Q4_0/Q5_0 scale anchor).
float signed_max(const float* x, int n) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  return max;
}

// ggml's quantize_row_mxfp4_ref, block by block: the exponent puts the largest
// magnitude amax in [8, 16) steps of d = 2^(e − 128), e = floor(log2 amax) + 125
// (0 for an all-zero block; amax below 2^−125 wraps modulo 256 as ggml's
// float → uint8_t cast does on x86), and each value takes the code whose value
// · d is nearest, the first in table order on a tie (so the smaller magnitude,
// and +0 for zeros).
void quantize_mxfp4(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n; b += 32, out += sizeof(blocks::MXFP4), x += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    // An infinite amax gets 0, the low byte of x86's result for ggml's (undefined) cast of inf.
    const uint8_t e = amax > 0 && std::isfinite(amax) ? uint8_t(int32_t(std::floor(std::log2(amax)) - 2 + 127)) : 0;
    const float d = blocks::e8m0_half(e);
    const auto nearest = [d](float v) {
      int best = 0;
      float best_err = std::fabs(float(blocks::kMxfp4Values[0]) * d - v);
      for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(float(blocks::kMxfp4Values[i]) * d - v);
        if (err < best_err) {
          best = i;
          best_err = err;
        }
      }
      return best;
    };
    out[offsetof(blocks::MXFP4, e)] = e;
    for (int j = 0; j < 16; ++j)
      out[offsetof(blocks::MXFP4, qs) + j] = uint8_t(nearest(x[j]) | (nearest(x[j + 16]) << 4));
  }
}
}  // namespace

bool quantize_supports(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 || t == DType::Q4_0 ||
         t == DType::Q5_0 || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K || t == DType::MXFP4 ||
         t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q2_K || t == DType::Q3_K;
}

void quantize_row(DType t, const float* x, void* dst, int64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  switch (t) {
    case DType::F32: std::memcpy(out, x, size_t(n) * 4); return;
    case DType::F16:
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = t == DType::F16 ? fp32_to_fp16(x[i]) : fp32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case DType::Q8_0:  // d = max|x| / 127, q = round(x / d)
      for (int64_t b = 0; b < n; b += 32, out += sizeof(blocks::Q8_0)) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        put_half(out, d);
        for (int j = 0; j < 32; ++j) out[2 + j] = uint8_t(int8_t(std::lround(x[b + j] * id)));
      }
      return;
    case DType::Q4_0:  // d = max / −8 (signed extreme), q = clamp(x/d + 8.5) in 0..15
      for (int64_t b = 0; b < n; b += 32, out += sizeof(blocks::Q4_0)) {
        const float d = signed_max(x + b, 32) / -8.0f, id = d ? 1.0f / d : 0.0f;
        put_half(out, d);
        for (int j = 0; j < 16; ++j) {
          const int lo = std::min(15, int(x[b + j] * id + 8.5f));
          const int hi = std::min(15, int(x[b + j + 16] * id + 8.5f));
          out[2 + j] = uint8_t(lo | (hi << 4));
        }
      }
      return;
    case DType::Q5_0:  // d = max / −16, q = clamp(x/d + 16.5) in 0..31; fifth bits packed in qh
      for (int64_t b = 0; b < n; b += 32, out += sizeof(blocks::Q5_0)) {
        const float d = signed_max(x + b, 32) / -16.0f, id = d ? 1.0f / d : 0.0f;
        put_half(out, d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
          const int lo = std::min(31, int(x[b + j] * id + 16.5f));
          const int hi = std::min(31, int(x[b + j + 16] * id + 16.5f));
          out[6 + j] = uint8_t((lo & 0x0f) | ((hi & 0x0f) << 4));
          qh |= uint32_t((lo >> 4) & 1) << j;
          qh |= uint32_t((hi >> 4) & 1) << (j + 16);
        }
        std::memcpy(out + 2, &qh, 4);
      }
      return;
    case DType::Q4_K:
    case DType::Q5_K: return kquant::quantize_q4_k_q5_k(x, out, n, t == DType::Q5_K);
    case DType::Q6_K: return kquant::quantize_q6_k(x, out, n);
    case DType::MXFP4: return quantize_mxfp4(x, out, n);
    case DType::Q4_1:
    case DType::Q5_1: return kquant::quantize_q4_1_q5_1(x, out, n, t == DType::Q5_1);
    case DType::Q2_K: return kquant::quantize_q2_k(x, out, n);
    case DType::Q3_K: return kquant::quantize_q3_k(x, out, n);
    default: throw std::invalid_argument("quantize_row: cannot produce " + std::string(dtype_name(t)));
  }
}

}  // namespace moelsp::kernels
