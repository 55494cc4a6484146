// Internal: the int8-activation kernels behind kernels::matmul.
#pragma once

#include <algorithm>
#include <vector>

#include "kernels/matmul.h"

namespace moelsp::kernels {

// matmul under one kernel setting (matmul reads it once and passes it here).
void matmul_with(const MatmulArgs& a, const KernelConfig& cfg);
// Weights with w.row_group > 1 (kernels/repack.h; matmul_repacked.cpp), rows on whole groups.
void matmul_repacked(const MatmulArgs& a, const KernelConfig& cfg);

// Whether matmul should take the int8 path for these weights (type, ISA, setting).
bool int8_path_available(const MatmulArgs& a, const KernelConfig& cfg);
void matmul_int8(const MatmulArgs& a, Isa isa);  // the Kernel::Int8 types, at Avx2 or above
// The types of decode_blocks.h (matmul_int8_decoded.cpp).
void matmul_int8_decoded(const MatmulArgs& a, Isa isa);

// The activation quantizers (AVX2; Q8_K also in AVX-512 where the kernel
// setting allows), with ref::quantize_row_q8 / _q8_k's results bit for bit.
void quantize_row_q8_simd(const float* x, BlockQ8* out, int64_t n);
void quantize_row_q8_k_simd(const float* x, BlockQ8K* out, int64_t n);

// The pre-quantized inputs of a call, when it carries them in this block format.
inline const BlockQ8* prequantized(const MatmulArgs& a, const BlockQ8*) {
  return a.xq && a.xq->blocks == ActBlocks::Q8 && a.xq->m == a.m && a.xq->cols == a.w.cols ? a.xq->q8.data() : nullptr;
}
inline const BlockQ8K* prequantized(const MatmulArgs& a, const BlockQ8K*) {
  return a.xq && a.xq->blocks == ActBlocks::Q8K && a.xq->m == a.m && a.xq->cols == a.w.cols ? a.xq->q8k.data()
                                                                                            : nullptr;
}

// Inputs go in chunks of 64 rows: each chunk is quantized into `buf` (input i
// at buf + (i − i0)·nb) unless the call carries them quantized (a.xq), then
// body(i0, i1, the chunk's blocks) runs the thread's weight rows over it.
template <typename Block, typename Quantize, typename Body>
void by_chunks(const MatmulArgs& a, int64_t nb, std::vector<Block>& buf, Quantize quantize, Body body) {
  constexpr int64_t kChunkM = 64;
  const Block* pre = prequantized(a, static_cast<const Block*>(nullptr));
  for (int64_t i0 = 0; i0 < a.m; i0 += kChunkM) {
    const int64_t i1 = std::min(a.m, i0 + kChunkM);
    if (pre) {
      body(i0, i1, pre + i0 * nb);
      continue;
    }
    if (buf.size() < size_t((i1 - i0) * nb)) buf.resize(size_t((i1 - i0) * nb));
    for (int64_t i = i0; i < i1; ++i) quantize(a.x + i * a.ldx, buf.data() + (i - i0) * nb, a.w.cols);
    body(i0, i1, static_cast<const Block*>(buf.data()));
  }
}

// The lane-vector kernel for many inputs (matmul_int8_tile.cpp): whether it
// serves weight type t for m inputs at ISA level `isa`, and the kernel
// itself for inputs i0..i1−1 of `a`, already quantized (input i's blocks at
// xq + (i − i0)·blocks per row).
constexpr int64_t kTileMinInputs = 4;
bool int8_tile_supports(DType t, int64_t m, Isa isa);
void matmul_int8_tile(const MatmulArgs& a, int64_t i0, int64_t i1, const BlockQ8* xq, Isa isa);
void matmul_int8_tile(const MatmulArgs& a, int64_t i0, int64_t i1, const BlockQ8K* xq, Isa isa);

}  // namespace moelsp::kernels
