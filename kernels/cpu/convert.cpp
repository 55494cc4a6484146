// Whole-row f32 → f16 conversion: what every prompt token's key and value
// rows go through on their way into an F16 KV cache. Element by element
// (the scalar fp32_to_fp16) it took ~5 % of a qwen3moe-mid prompt's time;
// F16C's vcvtps2ph converts 8 per instruction with the same rounding (to
// nearest even, overflow to inf, NaN quieted with its payload's top bits),
// so the bytes are the scalar function's (tests/test_kernels.cpp).
#include <immintrin.h>

#include "kernels/convert.h"
#include "kernels/isa.h"

namespace moelsp::kernels {
namespace {

__attribute__((target("avx2,f16c"))) void fp32_to_fp16_f16c(const float* x, uint16_t* y, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

}  // namespace

void fp32_to_fp16_row(const float* x, uint16_t* y, size_t n) {
  if (kernel_config().isa >= Isa::Avx2) return fp32_to_fp16_f16c(x, y, n);
  ref::fp32_to_fp16_row(x, y, n);
}

namespace ref {
void fp32_to_fp16_row(const float* x, uint16_t* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = kernels::fp32_to_fp16(x[i]);
}
}  // namespace ref

}  // namespace moelsp::kernels
