// Scalar float conversions (IEEE half, bfloat16) and whole-array reference
// conversions. These are the oracle that the SIMD and CUDA variants are
// tested against.
#pragma once

#include <cstddef>
#include <cstdint>

namespace moelsp::kernels {

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);  // round to nearest even; overflow → inf; NaN kept
float bf16_to_fp32(uint16_t b);
uint16_t fp32_to_bf16(float f);  // round to nearest even; NaN kept quiet

// n values, SIMD where the CPU has it (the same bits as fp32_to_fp16).
void fp32_to_fp16_row(const float* x, uint16_t* y, size_t n);

namespace ref {
void fp16_to_fp32(const uint16_t* x, float* y, size_t n);
void fp32_to_fp16_row(const float* x, uint16_t* y, size_t n);
void bf16_to_fp32(const uint16_t* x, float* y, size_t n);
}  // namespace ref

}  // namespace moelsp::kernels
