// Naive reference matmul: dequantize each weight row to f32, then a plain dot
// product in double precision. The oracle for kernels/cpu/matmul.cpp.
#include <cstring>
#include <stdexcept>
#include <vector>

#include "kernels/convert.h"
#include "kernels/matmul.h"

namespace moelsp::kernels::ref {

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case DType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = kernels::fp16_to_fp32(h[i]);
      return;
    }
    case DType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = kernels::bf16_to_fp32(h[i]);
      return;
    }
    case DType::Q8_0: {
      // block: fp16 scale d, 32 × int8 q; x = d · q
      const auto* b = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; i += 32, b += 34) {
        uint16_t dh;
        std::memcpy(&dh, b, 2);
        const float d = kernels::fp16_to_fp32(dh);
        const auto* q = reinterpret_cast<const int8_t*>(b + 2);
        for (int j = 0; j < 32; ++j) dst[i + j] = d * float(q[j]);
      }
      return;
    }
    default:
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

}  // namespace moelsp::kernels::ref
