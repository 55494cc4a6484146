// Quantized weights × int8 activations (AVX2): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and
// MXFP4 against 32-value blocks, Q4_K, Q5_K and Q6_K against 256-value blocks
// (the other types: matmul_int8_decoded.cpp). Performance
// model: a Q8_0 block is one 32-byte load of weights and one of activations,
// two sign ops, one maddubs (u8·s8 pairs → s16), one madd (→ s32), a convert
// and an FMA with the two scales: ~8 instructions per 32 MACs, where the f32
// path spends 4 FMAs plus the expansion of the weights. The K-quants' 4-, 5-
// and 6-bit values are unsigned, so they go straight into maddubs; their
// per-sub-block scales multiply the s16 pair sums in the madd, and their
// offsets (Q4_K/Q5_K's mins, Q6_K's −32) come from the activation block's
// 16-value sums, once per block. MXFP4's codes become their signed values
// (kMxfp4Values, within ±12) by one byte shuffle and take Q4_0's signed path;
// its scale is a power of two built from the exponent byte. Q4_1/Q5_1 (d·q + m)
// take their unsigned q straight into maddubs and meet the min with the
// activation block's sum, a second maddubs against ones. Decode streams one
// row at a time, two blocks per step in separate accumulators. These kernels serve decode (one input)
// and small batches; from kTileMinInputs inputs on, matmul_int8_tile.cpp's
// lane-vector kernel takes over where the ISA level has it.
// GCC 12's 512-bit intrinsics start from _mm512_undefined_*, which it then
// reports as "may be used uninitialized" (GCC bug 105593): a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../decode_blocks.h"
#include "../quant_blocks.h"
#include "kernels/convert.h"
#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "matmul_int8.h"
#include "simd.h"

namespace moelsp::kernels {
namespace {

__attribute__((target("avx2,fma"))) void quantize_row_q8_avx2(const float* x, BlockQ8* out, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* p = x + b * 32;
    __m256 v[4], mx = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(p + 8 * k);
      mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[k]));
    }
    const float amax = simd::hmax(mx);
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    out[b].d = d;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      // Round half away from zero exactly as the reference: trunc(s + copysign(0.5, s)) in f32.
      const __m256 s = _mm256_mul_ps(v[k], vid);
      const __m256 half = _mm256_or_ps(_mm256_and_ps(s, sign), _mm256_set1_ps(0.5f));
      q[k] = _mm256_cvttps_epi32(_mm256_add_ps(s, half));
    }
    simd::store_i8x32(q, out[b].q);
  }
}

// A 32-value weight block as 32 signed bytes, in element order.
template <DType T>
__attribute__((target("avx2,fma"))) inline __m256i block_bytes(const uint8_t* w) {
  if constexpr (T == DType::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2));
  } else if constexpr (T == DType::MXFP4) {
    // Q4_0's nibble layout (high nibbles shifted into the upper half, one mask); each code
    // becomes its value in [-12, 12] by one byte shuffle through the table (in both halves).
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + offsetof(blocks::MXFP4, qs)));
    const __m256i tbl =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks::kMxfp4Values)));
    const __m256i codes = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
                                           _mm256_set1_epi8(0x0f));
    return _mm256_shuffle_epi8(tbl, codes);
  } else {
    // Nibbles: elements 0..15 in the low halves of the 16 bytes, 16..31 in the high halves.
    constexpr size_t kQs = T == DType::Q5_0   ? offsetof(blocks::Q5_0, qs)
                           : T == DType::Q4_1 ? offsetof(blocks::Q4_1, qs)
                           : T == DType::Q5_1 ? offsetof(blocks::Q5_1, qs)
                                              : offsetof(blocks::Q4_0, qs);
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + kQs));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    if constexpr (T == DType::Q4_1) return q;              // unsigned 0..15; the min is a separate term
    if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {  // bit j of qh is the fifth bit (16) of element j
      uint32_t qh;
      std::memcpy(&qh, w + (T == DType::Q5_0 ? offsetof(blocks::Q5_0, qh) : offsetof(blocks::Q5_1, qh)), 4);
      const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                            3, 3, 3, 3, 3, 3, 3);
      const __m256i bits = _mm256_set1_epi64x(0x8040201008040201LL);
      const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(qh)), shuf);
      const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits);
      q = _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
      if constexpr (T == DType::Q5_1) return q;  // unsigned 0..31
      return _mm256_sub_epi8(q, _mm256_set1_epi8(16));
    }
    return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
  }
}

template <DType T>
constexpr size_t kBlockBytes = traits(T).type_size;

// A 32-value weight block's scale: fp16 d first in the block, or MXFP4's exponent byte.
template <DType T>
__attribute__((target("avx2,f16c"))) inline float block_scale(const uint8_t* w) {
  if constexpr (T == DType::MXFP4) return blocks::e8m0_half(w[offsetof(blocks::MXFP4, e)]);
  else return simd::half_at(w);
}

// Q4_1 and Q5_1 (value = d·q + m): unsigned q goes straight into maddubs, and
// the min meets the activation block's sum (a second maddubs against ones).
template <DType T>
constexpr bool kHasMin = T == DType::Q4_1 || T == DType::Q5_1;

// acc += d_w·d_x·Σ q_w·q_x (+ m_w·d_x·Σ q_x for Q4_1/Q5_1), qw = block_bytes<T>(w).
template <DType T>
__attribute__((target("avx2,fma,f16c"))) inline __m256 block_fma(__m256i qw, const uint8_t* w, const BlockQ8& x,
                                                                 __m256 acc) {
  const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q));
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (kHasMin<T>) {
    const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(qw, qx), ones));
    const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), qx), ones));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(block_scale<T>(w) * x.d), p, acc);
    return _mm256_fmadd_ps(_mm256_set1_ps(simd::half_at(w + 2) * x.d), s, acc);  // m follows d in both blocks
  } else {
    // maddubs wants unsigned × signed: |x| × (w with x's sign). Weights are in [-127, 127].
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qw, qx));
    return _mm256_fmadd_ps(_mm256_set1_ps(block_scale<T>(w) * x.d), _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones)),
                           acc);
  }
}

using simd::hsum;

__attribute__((target("avx2,fma"))) void quantize_row_q8_k_avx2(const float* x, BlockQ8K* out, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* p = x + b * 256;
    // The signed value of largest magnitude (the first one, as the reference's scan finds it).
    __m256 mx = _mm256_setzero_ps();
    for (int k = 0; k < 32; ++k) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(p + 8 * k)));
    const float amax = simd::hmax(mx);
    float max = 0;
    for (int i = 0; i < 256; ++i)
      if (std::fabs(p[i]) == amax) {
        max = p[i];
        break;
      }
    const float iscale = amax > 0 ? -127.0f / max : 0.0f;
    out[b].d = amax > 0 ? 1.0f / iscale : 0.0f;
    const __m256 vis = _mm256_set1_ps(iscale), lim = _mm256_set1_ps(127.0f);
    for (int g = 0; g < 8; ++g) {  // 32 values at a time; cvtps rounds half to even (the default mode)
      __m256i q[4];
      for (int k = 0; k < 4; ++k)
        q[k] = _mm256_cvtps_epi32(
            _mm256_min_ps(lim, _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(p + 32 * g + 8 * k), vis),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
      simd::store_i8x32(q, out[b].q + 32 * g);
    }
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += out[b].q[16 * g + i];
      out[b].bsums[g] = int16_t(s);
    }
  }
}

// The same in 512-bit vectors. Per 256-value block: the first value of
// largest magnitude found by a compare mask (the scalar scan it replaces cost
// ~128 iterations a block), and each bsum is one vector's lanes (16 values).
// A decode step quantizes every matmul input on the thread the others wait
// for, so this is serial time: a 2048-value row (qwen3moe-mid's attention
// output) took 1.9 µs with the AVX2 version, 0.7 µs with this one.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantize_row_q8_k_avx512(const float* x, BlockQ8K* out,
                                                                                   int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* p = x + b * 256;
    __m512 mx = _mm512_setzero_ps();
    for (int k = 0; k < 16; ++k) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(p + 16 * k)));
    const float amax = _mm512_reduce_max_ps(mx);
    float max = 0;
    const __m512 va = _mm512_set1_ps(amax);
    for (int k = 0; k < 16; ++k) {
      const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(p + 16 * k)), va, _CMP_EQ_OQ);
      if (hit) {
        max = p[16 * k + __builtin_ctz(hit)];
        break;
      }
    }
    const float iscale = amax > 0 ? -127.0f / max : 0.0f;
    out[b].d = amax > 0 ? 1.0f / iscale : 0.0f;
    const __m512 vis = _mm512_set1_ps(iscale), lim = _mm512_set1_ps(127.0f);
    for (int g = 0; g < 16; ++g) {
      const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(p + 16 * g), vis),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i q = _mm512_cvtps_epi32(_mm512_min_ps(lim, r));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q + 16 * g), _mm512_cvtsepi32_epi8(q));
      out[b].bsums[g] = int16_t(_mm512_reduce_add_epi32(q));
    }
  }
}

// Byte-shuffle control that copies 16-bit lane k (of each 128-bit half) to every lane.
// pair: lane k in the low half, lane k + 1 in the high half.
struct Pick16 {
  alignas(32) uint8_t m[8][32];
  alignas(32) uint8_t pair[7][32];
  constexpr Pick16() : m{}, pair{} {
    for (int k = 0; k < 8; ++k)
      for (int i = 0; i < 32; i += 2) {
        m[k][i] = uint8_t(2 * k), m[k][i + 1] = uint8_t(2 * k + 1);
        if (k < 7) pair[k][i] = uint8_t(2 * (k + i / 16)), pair[k][i + 1] = uint8_t(2 * (k + i / 16) + 1);
      }
  }
};
constexpr Pick16 kPick16;
__attribute__((target("avx2"))) inline __m256i pick16(int k) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(kPick16.m[k]));
}
__attribute__((target("avx2"))) inline __m256i pick16_pair(int k) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(kPick16.pair[k]));
}

// The row-streaming kernels, twice: for AVX2 (16 registers) and with the
// AVX-512 VL encoding, whose 32 registers hold four inputs' accumulators
// without spilling (the same 256-bit instructions otherwise).
#define ROWS_NS avx2
#define ROWS_TARGET __attribute__((target("avx2,fma,f16c")))
#define ROWS_AVX512 0
#include "matmul_int8_rows.inc"
#undef ROWS_NS
#undef ROWS_TARGET
#undef ROWS_AVX512
#define ROWS_NS wide
#define ROWS_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define ROWS_AVX512 1
#include "matmul_int8_rows.inc"
#undef ROWS_NS
#undef ROWS_TARGET
#undef ROWS_AVX512

thread_local std::vector<BlockQ8> tls_xq;
thread_local std::vector<BlockQ8K> tls_xk;

}  // namespace

void quantize_row_q8_simd(const float* x, BlockQ8* out, int64_t n) { quantize_row_q8_avx2(x, out, n); }
void quantize_row_q8_k_simd(const float* x, BlockQ8K* out, int64_t n) {
  if (kernel_config().isa >= Isa::Avx512Vnni) quantize_row_q8_k_avx512(x, out, n);
  else quantize_row_q8_k_avx2(x, out, n);
}

ActBlocks act_blocks(DType t) {
  const KernelConfig cfg = kernel_config();
  if (traits(t).kernel != Kernel::Int8 || cfg.isa < Isa::Avx2 || cfg.activations != Activations::Int8)
    return ActBlocks::None;
  if (blocks::is_decoded(t))
    return blocks::with_decoder(t, [](auto d) { return decltype(d)::kElems == 256 ? ActBlocks::Q8K : ActBlocks::Q8; });
  return traits(t).block_size == 256 ? ActBlocks::Q8K : ActBlocks::Q8;
}

void prepare_acts(ActBlocks b, int64_t m, int64_t cols, QuantizedActs& out) {
  out.blocks = b, out.m = m, out.cols = cols;
  if (b == ActBlocks::Q8 && out.q8.size() < size_t(m * (cols / 32))) out.q8.resize(size_t(m * (cols / 32)));
  if (b == ActBlocks::Q8K && out.q8k.size() < size_t(m * (cols / 256))) out.q8k.resize(size_t(m * (cols / 256)));
}

void quantize_act_rows(const float* x, int64_t ldx, int64_t r0, int64_t r1, QuantizedActs& out) {
  for (int64_t r = r0; r < r1; ++r) {
    if (out.blocks == ActBlocks::Q8) quantize_row_q8_avx2(x + r * ldx, out.q8.data() + r * (out.cols / 32), out.cols);
    else if (out.blocks == ActBlocks::Q8K)
      quantize_row_q8_k_simd(x + r * ldx, out.q8k.data() + r * (out.cols / 256), out.cols);
  }
}

void gather_act_rows(const QuantizedActs& src, const int64_t* rows, int64_t n, QuantizedActs& out) {
  prepare_acts(src.blocks, n, src.cols, out);
  const auto gather = [&](const auto& from, auto& to, int64_t per_row) {
    for (int64_t i = 0; i < n; ++i) std::copy_n(from.data() + rows[i] * per_row, per_row, to.data() + i * per_row);
  };
  if (src.blocks == ActBlocks::Q8) gather(src.q8, out.q8, src.cols / 32);
  else if (src.blocks == ActBlocks::Q8K) gather(src.q8k, out.q8k, src.cols / 256);
}

void quantize_acts(const float* x, int64_t ldx, int64_t m, int64_t cols, ActBlocks b, QuantizedActs& out) {
  prepare_acts(b, m, cols, out);
  quantize_act_rows(x, ldx, 0, m, out);
}

bool int8_path_available(const MatmulArgs& a, const KernelConfig& cfg) {
  return traits(a.w.type).kernel == Kernel::Int8 && cfg.isa >= Isa::Avx2 && cfg.activations == Activations::Int8;
}

namespace {

// Inputs i0..i1−1 of a chunk (quantized, input i at xq + (i − i0)·nb) over the
// thread's rows, kMax inputs per pass of a row (the rest in a smaller pass):
// one row streams at a time, against every input of the chunk — several
// interleaved row streams defeat the hardware prefetcher (measured on a 2.7 B
// Q8_0 model at 2 threads: 4-row lockstep decoded 47 tokens/s, row-at-a-time
// 105; on a 16384 × 2048 matrix with 2 inputs, 15 GMAC/s against 31+ for one
// row with both inputs). dot(integral_constant<M>, row, first input's blocks, out).
template <int kMax, class Block, class Dot>
void stream_rows(const MatmulArgs& a, int64_t i0, int64_t i1, const Block* xq, int64_t nb, Dot dot) {
  static_assert(kMax >= 1 && kMax <= 4);
  for (int64_t r = a.row_begin; r < a.row_end; ++r) {
    const uint8_t* w = a.w.row(r);
    for (int64_t i = i0; i < i1;) {
      float o[kMax];
      const Block* x = xq + (i - i0) * nb;
      const int n = int(std::min<int64_t>(kMax, i1 - i));
      if (n == kMax) dot(std::integral_constant<int, kMax>{}, w, x, o);
      else if (n == 3) dot(std::integral_constant<int, std::min(3, kMax)>{}, w, x, o);
      else if (n == 2) dot(std::integral_constant<int, std::min(2, kMax)>{}, w, x, o);
      else dot(std::integral_constant<int, 1>{}, w, x, o);
      for (int k = 0; k < n; ++k) a.y[(i + k) * a.ldy + r] = o[k];
      i += n;
    }
  }
}

// Inputs per pass of a row. AVX2's 16 registers (measured on 768 × 2048,
// GMAC/s per thread at 1 / 2 / 3 inputs: Q4_K 35 / 41 / 34, the third input's
// registers spill; Q6_K 31 / 42 / 43): Q4_K/Q5_K 2, the others 3. With 32
// registers the K-quants take 4 at once, and they keep the rows up to 7
// inputs (batched decode's dense matrices), where the tile kernel's per-row
// unpacking is not yet paid back (8192 × 1024, GMAC/s per thread at 4
// inputs: Q4_K 51 rows / 27 tile, Q6_K 44 / 33; at 8 the tile reaches 85 / 60).
// Q8_0's tile is already ahead at 4 inputs (45 against 30), and the other
// 32-value types' tiles are level with the rows there: they go to the tile
// from 4 inputs at every ISA level.
template <DType T>
constexpr bool kKQuant = T == DType::Q4_K || T == DType::Q5_K || T == DType::Q6_K;
template <DType T>
constexpr int kAvx2Inputs = T == DType::Q4_K || T == DType::Q5_K ? 2 : 3;
template <DType T>
constexpr int kWideInputs = kKQuant<T> ? 4 : 3;
constexpr int64_t kWideTileMinInputs = 8;

template <DType T>
bool use_tile(int64_t m, Isa isa) {
  if (kKQuant<T> && isa >= Isa::Avx512Vnni && m < kWideTileMinInputs) return false;
  return int8_tile_supports(T, m, isa);
}

// The types of this file: inputs quantized in Block's format (Q8 for the
// 32-value types, Q8K for the K-quants), then the tile or the row kernels.
template <DType T, class Block, class Quantize>
void matmul_rows_int8(const MatmulArgs& a, Isa isa, std::vector<Block>& buf, Quantize quantize) {
  const int64_t nb = a.w.cols / (std::is_same_v<Block, BlockQ8K> ? 256 : 32);
  by_chunks(a, nb, buf, quantize, [&](int64_t i0, int64_t i1, const Block* xq) {
    if (use_tile<T>(i1 - i0, isa)) return matmul_int8_tile(a, i0, i1, xq, isa);
    const auto pass = [nb](auto rows) {
      return [nb](auto m, const uint8_t* w, const Block* x, float* o) {
        decltype(rows)::template dot<T, decltype(m)::value>(w, x, nb, o);
      };
    };
    if (isa >= Isa::Avx512Vnni) stream_rows<kWideInputs<T>>(a, i0, i1, xq, nb, pass(wide::Rows{}));
    else stream_rows<kAvx2Inputs<T>>(a, i0, i1, xq, nb, pass(avx2::Rows{}));
  });
}

template <DType T>
void matmul_k_int8(const MatmulArgs& a, Isa isa) {
  matmul_rows_int8<T>(a, isa, tls_xk, quantize_row_q8_k_avx2);
}
template <DType T>
void matmul_q32_int8(const MatmulArgs& a, Isa isa) {
  matmul_rows_int8<T>(a, isa, tls_xq, quantize_row_q8_avx2);
}

}  // namespace

void matmul_int8(const MatmulArgs& a, Isa isa) {
  switch (a.w.type) {
    case DType::Q4_1: return matmul_q32_int8<DType::Q4_1>(a, isa);  // prompts: the decoded tile kernel
    case DType::Q5_1: return matmul_q32_int8<DType::Q5_1>(a, isa);
    default:
      if (blocks::is_decoded(a.w.type)) return matmul_int8_decoded(a, isa);
  }
  switch (a.w.type) {
    case DType::Q8_0: return matmul_q32_int8<DType::Q8_0>(a, isa);
    case DType::Q4_0: return matmul_q32_int8<DType::Q4_0>(a, isa);
    case DType::Q5_0: return matmul_q32_int8<DType::Q5_0>(a, isa);
    case DType::MXFP4: return matmul_q32_int8<DType::MXFP4>(a, isa);
    case DType::Q4_K: return matmul_k_int8<DType::Q4_K>(a, isa);
    case DType::Q5_K: return matmul_k_int8<DType::Q5_K>(a, isa);
    default: return matmul_k_int8<DType::Q6_K>(a, isa);
  }
}

}  // namespace moelsp::kernels
