// Int8-activation kernels for the types of decode_blocks.h (Q4_1, Q5_1, Q2_K,
// Q3_K, IQ4_NL, IQ4_XS and the i-quants), for one to a few inputs (decode);
// from kTileMinInputs inputs on, matmul_int8_tile.cpp's lane-vector kernel
// takes over where the ISA level has it for the type.
//
// Performance model: each weight block is decoded once into signed bytes and
// group scales (decode_simd.h: whole vectors for the 2-5-bit and table types,
// one codebook load per 4-8 weights for the i-quants), then dotted with every
// input of the call: per 32 weights a maddubs on |q| and the input's bytes
// with q's sign, a madd into eight int32 lanes (lanes 0-3 hold weights 0-15,
// lanes 4-7 weights 16-31, so a 16-weight group's scale is one half of the
// scale vector) and an FMA. Mins (Q4_1, Q5_1, Q2_K) meet the activation
// block's sums: Q8_K's 16-value bsums, or for 32-value blocks the sum taken
// with a second maddubs against ones.
#include <immintrin.h>

#include <vector>

#include "../decode_blocks.h"
#include "decode_simd.h"
#include "kernels/isa.h"
#include "matmul_int8.h"
#include "simd.h"

namespace moelsp::kernels {
namespace {

using blocks::Decoder;

constexpr int64_t kMaxInputs = 64;  // by_chunks' chunk

// Inputs 0 .. m−1 (at most kMaxInputs) of one weight row, block by block.
template <class D, class Block>
__attribute__((target("avx2,fma,f16c"))) void row_decoded(const uint8_t* w, const Block* x, int64_t nb, int64_t m,
                                                          float* out) {
  constexpr int kChunks = D::kElems / 32, kGroups = D::kElems / D::kGroup;
  alignas(32) int8_t q[D::kElems];
  float scale[kGroups], min[kGroups];
  __m256 acc[kMaxInputs];
  for (int64_t i = 0; i < m; ++i) acc[i] = _mm256_setzero_ps();
  float min_sum[kMaxInputs] = {};
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b, w += traits(D::kType).type_size) {
    blocks::simd_decode::decode<D>(w, q, scale, min);
    __m256 sv[kChunks];
    __m256i qa[kChunks], qw[kChunks];
    for (int c = 0; c < kChunks; ++c) {
      if constexpr (D::kGroup == 16) sv[c] = _mm256_setr_m128(_mm_set1_ps(scale[2 * c]), _mm_set1_ps(scale[2 * c + 1]));
      else sv[c] = _mm256_set1_ps(scale[c]);
      qw[c] = _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32 * c));
      qa[c] = _mm256_sign_epi8(qw[c], qw[c]);  // |q|: maddubs wants its first operand unsigned
    }
    for (int64_t i = 0; i < m; ++i) {
      const Block& xb = x[i * nb + b];
      __m256 s = _mm256_setzero_ps();
      for (int c = 0; c < kChunks; ++c) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q + 32 * c));
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(qa[c], _mm256_sign_epi8(xv, qw[c])), ones16);
        s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sv[c], s);
      }
      acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(xb.d), s, acc[i]);
      if constexpr (D::kMin) {
        float ms = 0;
        if constexpr (D::kElems == 256) {
          for (int g = 0; g < kGroups; ++g)
            ms += min[g] * float(D::kGroup == 16 ? xb.bsums[g] : xb.bsums[2 * g] + xb.bsums[2 * g + 1]);
        } else {
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
          const __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), xv), ones16);
          ms = min[0] * float(simd::hsum_epi32(sum));
        }
        min_sum[i] += ms * xb.d;
      }
    }
  }
  for (int64_t i = 0; i < m; ++i) out[i] = simd::hsum(acc[i]) - min_sum[i];
}

template <class D, class Block, class Quantize>
void matmul_decoded(const MatmulArgs& a, Isa isa, std::vector<Block>& buf, Quantize quantize) {
  const int64_t nb = a.w.cols / D::kElems;
  by_chunks(a, nb, buf, quantize, [&](int64_t i0, int64_t i1, const Block* xq) {
    if (int8_tile_supports(D::kType, i1 - i0, isa)) return matmul_int8_tile(a, i0, i1, xq, isa);
    float o[kMaxInputs];
    for (int64_t r = a.row_begin; r < a.row_end; ++r) {
      row_decoded<D>(a.w.row(r), xq, nb, i1 - i0, o);
      for (int64_t i = i0; i < i1; ++i) a.y[i * a.ldy + r] = o[i - i0];
    }
  });
}

thread_local std::vector<BlockQ8> tls_xq;
thread_local std::vector<BlockQ8K> tls_xk;

}  // namespace

void matmul_int8_decoded(const MatmulArgs& a, Isa isa) {
  blocks::with_decoder(a.w.type, [&](auto d) {
    using D = decltype(d);
    if constexpr (D::kElems == 256) matmul_decoded<D>(a, isa, tls_xk, quantize_row_q8_k_simd);
    else matmul_decoded<D>(a, isa, tls_xq, quantize_row_q8_simd);
  });
}

}  // namespace moelsp::kernels
