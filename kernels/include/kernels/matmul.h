// Matrix products with GGUF-typed weights and f32 activations.
//
// A weight matrix is ggml-shaped: `rows` rows of `cols` contiguous elements,
// each row `row_bytes` apart (quantized rows hold cols/block_size blocks).
// The products are y[i][r] = Σ_c W[r][c] · x[i][c] for r in [row_begin,
// row_end): callers split the rows across threads. Accumulation is in f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/isa.h"
#include "kernels/types.h"

namespace moelsp::kernels {

struct MatView {
  const void* data = nullptr;
  DType type = DType::F32;
  int64_t cols = 0;  // elements per row (the contracted dimension)
  int64_t rows = 0;
  size_t row_bytes = 0;
  // 1: plain rows. 16: rows repacked in interleaved groups of 16
  // (kernels/repack.h): only matmul reads it, with row ranges on whole
  // groups; row_bytes is then the repacked bytes per row, so rows · row_bytes
  // is its size and row(r) at a group boundary is where the group starts.
  int32_t row_group = 1;

  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + size_t(r) * row_bytes; }
};

// Weight types the matmul kernels accept: traits(t).kernel is not
// Kernel::None (kernels/types.h lists them).
bool matmul_supports(DType t);

struct QuantizedActs;

// x: m rows of w.cols floats, `ldx` apart; y: m rows, `ldy` apart.
// xq (optional): the same x already quantized (quantize_acts) — the int8
// kernels then skip quantizing it, which every call (every thread's share,
// every work item of a split matrix) would otherwise do again.
struct MatmulArgs {
  MatView w;
  const float* x = nullptr;
  int64_t ldx = 0;
  int64_t m = 1;
  float* y = nullptr;
  int64_t ldy = 0;
  int64_t row_begin = 0;
  int64_t row_end = 0;
  const QuantizedActs* xq = nullptr;
};

void dequantize_row(DType t, const void* src, float* dst, int64_t n);  // n elements

// The activation mode (Int8 or F32) is part of the kernel setting: kernels/isa.h.

// One input row as int8 blocks for Q8_0-style weights.
struct BlockQ8 {
  float d;  // scale: value = d · q
  int8_t q[32];
};
// ... and as 256-value blocks for the K-quants (Q4_K, Q5_K, Q6_K), with the sums of
// each 16 values for their per-sub-block offsets (mins, the −32 of Q6_K).
struct BlockQ8K {
  float d;
  int8_t q[256];
  int16_t bsums[16];
};

// Inputs quantized once for several int8 matmuls over the same rows (an
// expert's gate and up, the work items a matrix is split into). The block
// format is the one the weight type meets its inputs in; a matmul whose
// weights want the other format (or the f32 path) ignores it and reads x.
enum class ActBlocks { None, Q8, Q8K };
struct QuantizedActs {
  ActBlocks blocks = ActBlocks::None;
  int64_t m = 0, cols = 0;
  std::vector<BlockQ8> q8;    // [m][cols / 32] when blocks == Q8
  std::vector<BlockQ8K> q8k;  // [m][cols / 256] when blocks == Q8K
};
// The format weights of type t take their inputs in under the current kernel
// setting (None: they take f32, or quantize in a form of their own).
ActBlocks act_blocks(DType t);
// Quantizes x (m rows of `cols`, ldx apart) as matmul would for weights wanting `b`.
void quantize_acts(const float* x, int64_t ldx, int64_t m, int64_t cols, ActBlocks b, QuantizedActs& out);
// The same in two steps, so threads can fill disjoint row ranges: size `out`,
// then quantize rows [r0, r1) of x into it.
void prepare_acts(ActBlocks b, int64_t m, int64_t cols, QuantizedActs& out);
void quantize_act_rows(const float* x, int64_t ldx, int64_t r0, int64_t r1, QuantizedActs& out);
// out = rows rows[0..n) of src, block for block: the same bits quantizing
// those rows of x would give (a MoE layer quantizes its input once, then each
// expert takes its tokens' rows).
void gather_act_rows(const QuantizedActs& src, const int64_t* rows, int64_t n, QuantizedActs& out);

// Optimized (SIMD, runtime ISA dispatch). Tolerance vs ref: see tests/test_kernels.cpp.
void matmul(const MatmulArgs& a);

// Cache lines a kernel requests while it computes: `lines` consecutive lines
// from p (64-byte aligned). Attention's decode step passes the next chunk's
// KV rows, a share to each kernel call; the AVX-512 tiles spread the requests
// over their steps (a line or two every few FMAs), where a burst of 64 at
// the call's start held the core until the lines' miss buffers freed
// (engine/layers/attention.cpp, Ahead). Other paths request them at once.
struct LinesAhead {
  const uint8_t* p = nullptr;
  int64_t lines = 0;
};
void prefetch_lines(const LinesAhead& a);

// Attention's P·V: y[i][c] = Σ_j p[i][j] · v[j][c] for i < m, j < n_v, c < n
// (rows ldp, ldv and ldy floats apart). Overwrites y, or adds to it when
// `accumulate` (attention over a paged cache sums one block at a time).
struct WeightedRowsArgs {
  const float* p = nullptr;
  int64_t ldp = 0, m = 0;
  const float* v = nullptr;
  int64_t ldv = 0, n_v = 0, n = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  bool accumulate = false;
  // When set, V is read from here as F16 (a KV cache's rows where they lie,
  // ldv elements apart) and v is ignored: the same sums, the values widened
  // in registers instead of in a buffer first.
  const uint16_t* v_f16 = nullptr;
  // The same for Q8_0 rows, v_q8_stride bytes apart (n a multiple of 32):
  // each value widened to d·q (exact in f32), so the sums are those of the
  // rows dequantized to F32.
  const uint8_t* v_q8 = nullptr;
  size_t v_q8_stride = 0;
  LinesAhead ahead{};  // requested while the sums run (LinesAhead)
  // BF16 rows, ldv elements apart. At Isa::Avx512Bf16 the sums are
  // vdpbf16ps's with each p rounded to bf16 (≤ 2^-9 relative a product);
  // below, the values widen exactly and the sums are the F32 path's.
  const uint16_t* v_bf16 = nullptr;
};
void weighted_rows(const WeightedRowsArgs& a);

// Attention's scores: s[i][j] = Σ_c q[i][c] · k_j[c] for i < m, j < n,
// c < hd; key j at byte j·k_stride of k, of type k_type (F32, F16, BF16 or
// Q8_0 with hd a multiple of 32: a KV cache's rows where they lie). Rows of q
// and s are ldq and lds floats apart. Q8_0 elements are widened to d·q (exact
// in f32) before they meet q, so every type gives what its values widened to
// F32 give, bit for bit, at one ISA level. BF16 keys at Isa::Avx512Bf16 are
// the exception: they meet q rounded to bf16 in vdpbf16ps (≤ 2^-9 relative a
// product, f32 sums).
struct ScoresArgs {
  const float* q = nullptr;
  int64_t ldq = 0, m = 0;
  const void* k = nullptr;
  DType k_type = DType::F32;
  size_t k_stride = 0;
  int64_t n = 0, hd = 0;
  float* s = nullptr;
  int64_t lds = 0;
  LinesAhead ahead{};  // requested while the scores run (LinesAhead)
  // Optional, for BF16 keys at Isa::Avx512Bf16: q already rounded
  // (round_rows_bf16, rows bf16_row_stride(hd) apart), so that a job's many
  // calls over the same queries round them once.
  const uint16_t* q_bf16 = nullptr;
};
void scores(const ScoresArgs& a);
// Rows of n floats (ldx apart) rounded to bf16 (nearest even), each padded
// with zeros to bf16_row_stride(n) elements (whole 32-element steps).
int64_t bf16_row_stride(int64_t n);
void round_rows_bf16(const float* x, int64_t rows, int64_t ldx, int64_t n, uint16_t* out);

// Attention's softmax over a row of scores, in two passes: scale_max
// multiplies p[0, n) by `scale` in place and returns the largest of them and
// `init`; exp_shift_sum replaces each p[j] by e^(p[j] − shift) (0 below f32's
// normal range) and returns their sum. Vectorized exponentials are within
// 2e-7 relative of std::exp (kernels/cpu/softmax.cpp).
float scale_max(float* p, int64_t n, float scale, float init);
float exp_shift_sum(float* p, int64_t n, float shift);
// SwiGLU's product h[j] = silu(g[j]) · u[j] = g[j] / (1 + e^−g[j]) · u[j]
// (h may be g or u), with the same exponential: within 1e-6 relative of ref.
void silu_mul(const float* g, const float* u, float* h, int64_t n);

// y[c] += Σ_r s[r] · W[r][c] for r in [row_begin, row_end): the transposed
// product, used by MLA's absorbed attention.
void matmul_t_accumulate(const MatView& w, const float* s, float* y, int64_t row_begin, int64_t row_end);
float dot_f32(const float* a, const float* b, int64_t n);

namespace ref {
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
void matmul(const MatmulArgs& a);

// The int8 path in plain scalar code: quantization of x and Σ_blocks
// d_w·d_x·Σ q_w·q_x with integer block sums. 32-value blocks: x·(1/d) rounded
// half away from zero in f32, d = amax/127 (llama.cpp's Q8_0 rule, with an f32
// scale); 256-value blocks: llama.cpp's Q8_K rule, x·(−127/max) rounded half
// to even, max the signed value of largest magnitude, d = 1/(−127/max).
void quantize_row_q8(const float* x, BlockQ8* out, int64_t n);
void quantize_row_q8_k(const float* x, BlockQ8K* out, int64_t n);
// Weights of any Kernel::Int8 type (kernels/types.h) against int8 activations.
void matmul_int8(const MatmulArgs& a);
void weighted_rows(const WeightedRowsArgs& a);
void scores(const ScoresArgs& a);  // summed in double
float scale_max(float* p, int64_t n, float scale, float init);
float exp_shift_sum(float* p, int64_t n, float shift);               // std::exp, summed in double
void silu_mul(const float* g, const float* u, float* h, int64_t n);  // std::exp
}  // namespace ref

}  // namespace moelsp::kernels
