// K-quant quantizers (Q4_K, Q5_K, Q6_K): llama.cpp's reference algorithms, so
// files we write match what its quantizer would write. Per 256-value
// super-block: Q4_K/Q5_K fit a scale and a min to each 32-value sub-block by a
// weighted least-squares search over candidate scales (make_qkx2_quants),
// then store the eight scales and mins as 6-bit multiples of two fp16
// super-scales; Q6_K fits a signed scale to each 16 values (make_qx_quants,
// weights x²) and stores int8 multiples of one fp16 super-scale. Offline work:
// plain scalar code.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "../quant_blocks.h"
#include "kernels/convert.h"
#include "quantize_k.h"

namespace moelsp::kernels::kquant {
namespace {

int nearest_int(float v) { return int(std::nearbyint(v)); }

void put_half(uint8_t* p, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}
float get_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// Scale and min for n values in [0, nmax] levels: returns the scale, *the_min
// the (positive) offset subtracted, L the levels.
float make_qkx2_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min, uint8_t* Laux,
                       float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]), max = std::max(max, x[i]);
    sum_w += w[i], sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, 0);
    *the_min = -min;
    return 0.0f;
  }
  float iscale = float(nmax) / (max - min), scale = 1 / iscale, best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = uint8_t(std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    best_error += w[i] * diff * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = uint8_t(l);
      sum_l += w[i] * float(l), sum_l2 += w[i] * float(l * l), sum_xl += w[i] * float(l) * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) this_min = 0, this_scale = sum_xl / sum_l2;
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * Laux[i] + this_min - x[i];
        cur_error += w[i] * diff * diff;
      }
      if (cur_error < best_error) {
        std::copy(Laux, Laux + n, L);
        best_error = cur_error, scale = this_scale, min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Signed scale for n values in [-nmax, nmax - 1] (stored + nmax in L), weights x².
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  if (amax < 1e-15f) {
    std::fill(L, L + n, 0);
    return 0.0f;
  }
  const auto fit = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * float(l), *suml2 += w * float(l * l);
    }
  };
  const auto assign = [&](float iscale) {
    for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1));
  };
  float sumlx, suml2;
  fit(-float(nmax) / max, &sumlx, &suml2);
  assign(-float(nmax) / max);
  float scale = suml2 > 0 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(float(nmax) + 0.1f * float(is)) / max;
    fit(iscale, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      assign(iscale);
      scale = sumlx / suml2, best = scale * sumlx;
    }
  }
  return scale;
}

// Q4_K / Q5_K scales and mins: 6 bits each, packed as get_scale_min_k4 reads them.
void pack_scale_min(uint8_t* sc, int j, int ls, int lm) {
  if (j < 4) {
    sc[j] = uint8_t(ls), sc[j + 4] = uint8_t(lm);
  } else {
    sc[j + 4] = uint8_t((ls & 0x0f) | ((lm & 0x0f) << 4));
    sc[j - 4] |= uint8_t((ls >> 4) << 6);
    sc[j] |= uint8_t((lm >> 4) << 6);
  }
}
void unpack_scale_min(const uint8_t* sc, int j, int* s, int* m) {
  if (j < 4) {
    *s = sc[j] & 63, *m = sc[j + 4] & 63;
  } else {
    *s = (sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4);
    *m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
}

}  // namespace

void quantize_q4_k_q5_k(const float* x, uint8_t* y, int64_t n, bool five) {
  const int nmax = five ? 31 : 15;
  const size_t block = five ? sizeof(blocks::Q5_K) : sizeof(blocks::Q4_K);
  for (int64_t b = 0; b < n / 256; ++b, x += 256, y += block) {
    uint8_t L[256], Laux[32];
    float weights[32], mins[8], scales[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      const float* xs = x + 32 * j;
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
      const float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
      scales[j] = make_qkx2_quants(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20);
      max_scale = std::max(max_scale, scales[j]), max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f, inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    std::memset(y, 0, block);
    uint8_t* sc = y + 4;
    for (int j = 0; j < 8; ++j)
      pack_scale_min(sc, j, std::min(63, nearest_int(inv_scale * scales[j])),
                     std::min(63, nearest_int(inv_min * mins[j])));
    put_half(y, max_scale / 63.0f);
    put_half(y + 2, max_min / 63.0f);
    const float d_all = get_half(y), dmin_all = get_half(y + 2);
    // Levels again, against the scales as stored.
    for (int j = 0; j < 8; ++j) {
      int s, m;
      unpack_scale_min(sc, j, &s, &m);
      const float d = d_all * float(s);
      if (d == 0) continue;
      const float dm = dmin_all * float(m);
      for (int l = 0; l < 32; ++l) L[32 * j + l] = uint8_t(std::clamp(nearest_int((x[32 * j + l] + dm) / d), 0, nmax));
    }
    uint8_t* qh = y + 16;  // Q5_K only: bit j of byte l is the fifth bit of value 32·j + l
    uint8_t* qs = y + (five ? 48 : 16);
    for (int j = 0; j < 256; j += 64) {
      for (int l = 0; l < 32; ++l) {
        int lo = L[j + l], hi = L[j + l + 32];
        if (five) {
          if (lo > 15) lo -= 16, qh[l] |= uint8_t(1 << (j / 32));
          if (hi > 15) hi -= 16, qh[l] |= uint8_t(1 << (j / 32 + 1));
        }
        qs[l] = uint8_t(lo | (hi << 4));
      }
      qs += 32;
    }
  }
}

void quantize_q6_k(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, x += 256, y += sizeof(blocks::Q6_K)) {
    int8_t L[256];
    float scales[16], max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      if (std::fabs(scales[ib]) > max_abs_scale) max_abs_scale = std::fabs(scales[ib]), max_scale = scales[ib];
    }
    std::memset(y, 0, sizeof(blocks::Q6_K));
    if (max_abs_scale < 1e-15f) continue;  // all zeros
    const float iscale = -128.0f / max_scale;
    put_half(y + offsetof(blocks::Q6_K, d), 1 / iscale);
    auto* sc = reinterpret_cast<int8_t*>(y + 192);
    for (int ib = 0; ib < 16; ++ib) sc[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
    const float d_all = get_half(y + offsetof(blocks::Q6_K, d));
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * float(sc[j]);
      if (d == 0) continue;
      for (int l = 0; l < 16; ++l) L[16 * j + l] = int8_t(std::clamp(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
    }
    uint8_t* ql = y;
    uint8_t* qh = y + 128;
    for (int j = 0; j < 256; j += 128) {
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        ql[l] = uint8_t((q1 & 15) | ((q3 & 15) << 4));
        ql[l + 32] = uint8_t((q2 & 15) | ((q4 & 15) << 4));
        qh[l] = uint8_t((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
      ql += 64, qh += 32;
    }
  }
}

}  // namespace moelsp::kernels::kquant
