// Quantizers: f32 rows → GGUF block formats (the inverse of dequantize_row;
// Q2_K and Q3_K search their scales more simply than llama.cpp; the other
// types follow llama.cpp's reference quantizers).
#pragma once

#include <cstdint>

#include "kernels/types.h"

namespace moelsp::kernels {

// Types quantize_row can produce: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K, MXFP4 (not the i-quants, whose quantizers need an importance matrix).
bool quantize_supports(DType t);
// n must be a multiple of the type's block size; dst holds row_bytes(t, n).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace moelsp::kernels
