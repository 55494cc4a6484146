// Quantizers: f32 rows → GGUF block formats (the inverse of dequantize_row,
// producing the same bytes llama.cpp's reference quantizers would).
#pragma once

#include <cstdint>

#include "kernels/types.h"

namespace moelsp::kernels {

// Types quantize_row can produce: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K, MXFP4.
bool quantize_supports(DType t);
// n must be a multiple of the type's block size; dst holds row_bytes(t, n).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace moelsp::kernels
