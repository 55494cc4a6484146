// Weights repacked at load for the few-input kernels.
//
// Decode multiplies each weight row by one input (a few, with several
// streams): a row kernel streams a row, unpacks each block's scales, and ends
// in a horizontal sum — per 256-value Q4_K block ~45 instructions for 256
// multiply-adds, more than memory needs at one input and again per input.
// Rows interleaved 16 at a time (blocks::Q4_Kx16 and the others in
// quant_blocks.h, as llama.cpp's repacked CPU types do with 8) put one row in
// each 32-bit lane of an AVX-512 vector: one vpdpbusd with a 4-byte broadcast
// of the input serves 16 rows, a sub-block's scales multiply 16 rows' sums at
// once, no horizontal sum is left, and every extra input costs only its own
// dot products (the unpacked weights stay in registers). One kernel per type
// serves decode and prompts (inputs 8 at a time).
//
// Types: Q4_K, Q6_K, Q8_0, Q5_0, Q4_0, Q4_1, Q5_1. Only what matmul alone
// reads is repacked (the engine's repack_dense: dense projections, the head,
// and the routed experts when every weight stays in RAM), and only where the
// kernel setting is AVX-512 VNNI with int8 activations; a repacked matrix
// under another setting (tests, MOELSP_ISA) is unpacked a group at a time and
// computed as plain rows, with the same results as the plain matrix under
// that setting.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/matmul.h"

namespace moelsp::kernels {

constexpr int kRepackRows = 16;

// Whether w would be repacked: one of the types above, plain rows, a whole
// number of groups, and the kernel setting now at AVX-512 VNNI with int8 activations.
bool repack_supported(const MatView& w);
size_t repacked_bytes(const MatView& w);  // rows × row_bytes (Q4_K: plus 64 per group and block)
// The plain layout's bytes per row of a repacked matrix.
size_t plain_row_bytes(const MatView& w);
// Writes w repacked into dst (repacked_bytes(w), 64-byte aligned) and returns
// the view of it. Only for repack_supported(w).
MatView repack(const MatView& w, void* dst);
// The same in parts, so threads can share a large matrix: groups [g0, g1)
// (rows 16·g0 … 16·g1 − 1) into dst, and the view repack returns.
void repack_groups(const MatView& w, void* dst, int64_t g0, int64_t g1);
MatView repacked_view(const MatView& w, void* dst);
// Rows 16·g … 16·g + 15 of a repacked matrix back in their plain layout
// (16 × row_bytes at dst): exactly the bytes repack read.
void unpack_group(const MatView& w, int64_t g, uint8_t* dst);

}  // namespace moelsp::kernels
