// Scalar reference of the int8-activation path (kernels/cpu/matmul_int8.cpp).
#include <cmath>
#include <cstring>
#include <vector>

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

void matmul_q8_0_int8(const MatmulArgs& a) {
  const int64_t nb = a.w.cols / 32;
  std::vector<BlockQ8> xq(static_cast<size_t>(nb));
  for (int64_t i = 0; i < a.m; ++i) {
    quantize_row_q8(a.x + i * a.ldx, xq.data(), a.w.cols);
    for (int64_t r = a.row_begin; r < a.row_end; ++r) {
      const uint8_t* w = a.w.row(r);
      double sum = 0;
      for (int64_t b = 0; b < nb; ++b, w += 34) {
        uint16_t dh;
        std::memcpy(&dh, w, 2);
        int32_t isum = 0;
        for (int k = 0; k < 32; ++k) isum += int32_t(int8_t(w[2 + k])) * xq[size_t(b)].q[k];
        sum += double(kernels::fp16_to_fp32(dh)) * double(xq[size_t(b)].d) * double(isum);
      }
      a.y[i * a.ldy + r] = float(sum);
    }
  }
}

}  // namespace moelsp::kernels::ref
