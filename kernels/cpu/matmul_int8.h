// Internal: the int8-activation kernels behind kernels::matmul.
#pragma once

#include "kernels/matmul.h"

namespace moelsp::kernels {

// Whether matmul should take the int8 path for these weights (type, ISA, setting).
bool int8_path_available(const MatmulArgs& a, const KernelConfig& cfg);
void matmul_int8(const MatmulArgs& a, Isa isa);  // the Kernel::Int8 types, at Avx2 or above

// The lane-vector kernel for many inputs (matmul_int8_tile.cpp): whether it
// serves weight type t for m inputs at ISA level `isa`, and the kernel
// itself for inputs i0..i1−1 of `a`, already quantized (input i's blocks at
// xq + (i − i0)·blocks per row).
constexpr int64_t kTileMinInputs = 4;
bool int8_tile_supports(DType t, int64_t m, Isa isa);
void matmul_int8_tile(const MatmulArgs& a, int64_t i0, int64_t i1, const BlockQ8* xq, Isa isa);
void matmul_int8_tile(const MatmulArgs& a, int64_t i0, int64_t i1, const BlockQ8K* xq, Isa isa);

}  // namespace moelsp::kernels
