// Quantizers for Q4_1, Q5_1 (llama.cpp's reference rule: the block's min and
// range) and the low-bit K-quants Q2_K and Q3_K (scales searched per group of
// 16, then the group scales quantized against a super-block scale and the
// values requantized with them, the scheme of llama.cpp's quantize_row_q2_K /
// q3_K; our search is simpler, and the bytes need not match llama.cpp's — the
// decoders are what must agree, and tests/test_quant_types.cpp bounds the error).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "../quant_blocks.h"
#include "kernels/convert.h"
#include "quantize_k.h"

namespace moelsp::kernels::kquant {
namespace {

void put_half(uint8_t* p, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

int nearest_int(float v) { return int(std::lround(v)); }

// One group of n values as scale·L − off, L in [0, nmax], off ≥ 0 (the
// group's min is never above 0, so zeros stay representable): candidate
// inverse scales around nmax / range, each followed by the weighted least
// squares fit of (scale, −off) to its L; weights |x| as llama.cpp's Q2_K.
void fit_affine(const float* x, int n, int nmax, float* scale, float* off) {
  float mn = 0, mx = x[0];
  for (int i = 0; i < n; ++i) mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
  if (mx <= mn) {
    *scale = 0, *off = -mn;
    return;
  }
  float best_a = (mx - mn) / float(nmax), best_b = mn, best_err = INFINITY;
  for (int step = -6; step <= 12; ++step) {
    const float iscale = (float(nmax) + 0.1f * float(step)) / (mx - mn);
    float sw = 0, sl = 0, sl2 = 0, sx = 0, slx = 0;
    int L[32];
    for (int i = 0; i < n; ++i) {
      L[i] = std::clamp(nearest_int(iscale * (x[i] - mn)), 0, nmax);
      const float w = std::fabs(x[i]) + 1e-9f;
      sw += w, sl += w * float(L[i]), sl2 += w * float(L[i]) * float(L[i]), sx += w * x[i],
          slx += w * x[i] * float(L[i]);
    }
    const float D = sw * sl2 - sl * sl;
    if (D <= 0) continue;
    float a = (sw * slx - sx * sl) / D, b = (sl2 * sx - sl * slx) / D;
    if (b > 0) b = 0, a = sl2 > 0 ? slx / sl2 : 0;
    if (a <= 0) continue;
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float e = a * float(L[i]) + b - x[i];
      err += (std::fabs(x[i]) + 1e-9f) * e * e;
    }
    if (err < best_err) best_err = err, best_a = a, best_b = b;
  }
  *scale = best_a, *off = -best_b;
}

// One group of n values as scale·L, L in [−nmax, nmax − 1] (Q3_K: −4..3):
// candidate scales around the signed extreme, each refit by least squares
// with weights x² (the larger values matter most).
float fit_symmetric(const float* x, int n, int nmax) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  if (amax == 0) return 0;
  float best = max / -float(nmax), best_err = INFINITY;
  for (int step = -9; step <= 9; ++step) {
    const float iscale = -(float(nmax) + 0.1f * float(step)) / max;
    float sxl = 0, sll = 0;
    int L[32];
    for (int i = 0; i < n; ++i) {
      L[i] = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sxl += w * x[i] * float(L[i]), sll += w * float(L[i]) * float(L[i]);
    }
    if (sll <= 0) continue;
    const float s = sxl / sll;
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float e = s * float(L[i]) - x[i];
      err += x[i] * x[i] * e * e;
    }
    if (err < best_err) best_err = err, best = s;
  }
  return best;
}

}  // namespace

// Q4_1 / Q5_1, llama.cpp's rule: d = (max − min)/(2^bits − 1), m = min,
// q = min(2^bits − 1, int(((x − min)/d) + 0.5)).
void quantize_q4_1_q5_1(const float* x, uint8_t* y, int64_t n, bool five) {
  const int nmax = five ? 31 : 15;
  for (int64_t b = 0; b < n; b += 32, x += 32) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < 32; ++j) mn = std::min(mn, x[j]), mx = std::max(mx, x[j]);
    const float d = (mx - mn) / float(nmax), id = d ? 1.0f / d : 0.0f;
    uint8_t* out = y;
    put_half(out, d);
    put_half(out + 2, mn);
    uint8_t* qs = out + (five ? offsetof(blocks::Q5_1, qs) : offsetof(blocks::Q4_1, qs));
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(nmax, int((x[j] - mn) * id + 0.5f));
      const int hi = std::min(nmax, int((x[j + 16] - mn) * id + 0.5f));
      qs[j] = uint8_t((lo & 15) | ((hi & 15) << 4));
      qh |= uint32_t((lo >> 4) & 1) << j;
      qh |= uint32_t((hi >> 4) & 1) << (j + 16);
    }
    if (five) std::memcpy(out + offsetof(blocks::Q5_1, qh), &qh, 4);
    y += five ? sizeof(blocks::Q5_1) : sizeof(blocks::Q4_1);
  }
}

// Q2_K: 16 groups of 16 fit as scale·L − off (L 0..3); the scales and offs
// become 4-bit multiples of d = max scale / 15 and dmin = max off / 15, then
// every value is requantized with its group's stored pair.
void quantize_q2_k(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n; b += 256, x += 256, y += sizeof(blocks::Q2_K)) {
    float scale[16], off[16], max_scale = 0, max_off = 0;
    for (int g = 0; g < 16; ++g) {
      fit_affine(x + 16 * g, 16, 3, &scale[g], &off[g]);
      max_scale = std::max(max_scale, scale[g]), max_off = std::max(max_off, off[g]);
    }
    const float d = max_scale / 15.0f, dmin = max_off / 15.0f;
    put_half(y + offsetof(blocks::Q2_K, d), d);
    put_half(y + offsetof(blocks::Q2_K, dmin), dmin);
    // What the decoder will read back: the fp16-rounded super-block scales.
    const float dr = fp16_to_fp32(fp32_to_fp16(d)), dminr = fp16_to_fp32(fp32_to_fp16(dmin));
    uint8_t L[256];
    for (int g = 0; g < 16; ++g) {
      const int qs = d > 0 ? std::clamp(nearest_int(scale[g] / d), 0, 15) : 0;
      const int qm = dmin > 0 ? std::clamp(nearest_int(off[g] / dmin), 0, 15) : 0;
      y[offsetof(blocks::Q2_K, scales) + size_t(g)] = uint8_t(qs | (qm << 4));
      const float s = dr * float(qs), o = dminr * float(qm);
      for (int i = 0; i < 16; ++i)
        L[16 * g + i] = uint8_t(s > 0 ? std::clamp(nearest_int((x[16 * g + i] + o) / s), 0, 3) : 0);
    }
    uint8_t* qs = y + offsetof(blocks::Q2_K, qs);
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l)
        qs[32 * h + l] = uint8_t(L[128 * h + l] | (L[128 * h + 32 + l] << 2) | (L[128 * h + 64 + l] << 4) |
                                 (L[128 * h + 96 + l] << 6));
  }
}

// Q3_K: 16 groups of 16 fit as scale·L (L −4..3); the scales become signed
// 6-bit multiples of d = (the scale of largest magnitude) / −32, then the
// values are requantized with them and stored as L + 4: two low bits in qs
// (Q2_K's layout), the third in hmask.
void quantize_q3_k(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n; b += 256, x += 256, y += sizeof(blocks::Q3_K)) {
    std::memset(y, 0, sizeof(blocks::Q3_K));
    float scale[16], amax = 0, max = 0;
    for (int g = 0; g < 16; ++g) {
      scale[g] = fit_symmetric(x + 16 * g, 16, 4);
      if (std::fabs(scale[g]) > amax) amax = std::fabs(scale[g]), max = scale[g];
    }
    const float d = amax > 0 ? max / -32.0f : 0.0f;
    put_half(y + offsetof(blocks::Q3_K, d), d);
    const float dr = fp16_to_fp32(fp32_to_fp16(d));
    uint8_t* sc = y + offsetof(blocks::Q3_K, scales);
    uint8_t L[256];
    for (int g = 0; g < 16; ++g) {
      const int q = d != 0 ? std::clamp(nearest_int(scale[g] / d), -32, 31) : 0;
      const int u = q + 32;  // stored 6 bits: low nibble, then two high bits
      if (g < 8) sc[g] = uint8_t(sc[g] | (u & 15));
      else sc[g - 8] = uint8_t(sc[g - 8] | ((u & 15) << 4));
      sc[8 + g % 4] = uint8_t(sc[8 + g % 4] | ((u >> 4) << (2 * (g / 4))));
      const float s = dr * float(q);
      for (int i = 0; i < 16; ++i)
        L[16 * g + i] = uint8_t((s != 0 ? std::clamp(nearest_int(x[16 * g + i] / s), -4, 3) : 0) + 4);
    }
    uint8_t* qs = y + offsetof(blocks::Q3_K, qs);
    uint8_t* hm = y + offsetof(blocks::Q3_K, hmask);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l) {
          const uint8_t u = L[128 * h + 32 * j + l];
          qs[32 * h + l] = uint8_t(qs[32 * h + l] | ((u & 3) << (2 * j)));
          if (u & 4) hm[l] = uint8_t(hm[l] | (1u << (4 * h + j)));
        }
  }
}

}  // namespace moelsp::kernels::kquant
