// Internal: the K-quant quantizers behind kernels::quantize_row.
#pragma once

#include <cstdint>

namespace moelsp::kernels::kquant {

void quantize_q4_k_q5_k(const float* x, uint8_t* y, int64_t n, bool five);  // n a multiple of 256
void quantize_q6_k(const float* x, uint8_t* y, int64_t n);
// quantize_low.cpp
void quantize_q4_1_q5_1(const float* x, uint8_t* y, int64_t n, bool five);  // n a multiple of 32
void quantize_q2_k(const float* x, uint8_t* y, int64_t n);                  // n a multiple of 256
void quantize_q3_k(const float* x, uint8_t* y, int64_t n);

}  // namespace moelsp::kernels::kquant
