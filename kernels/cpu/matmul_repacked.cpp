// matmul on repacked weights (kernels/repack.h): Q4_K, Q6_K, Q8_0, Q5_0 and Q4_0 (blocks::Q4_Kx16, …).
//
// Performance model, per 16 rows and 256-value block at one input: 32 vector
// loads and 48 logic ops unpack the nibbles, 64 vpdpbusd (each a 4-byte
// broadcast of the input against 16 rows × 4 weights) make the sub-block sums,
// 8 vpmulld apply the 6-bit scales, 4 vpdpwssd the mins, and 4 f32 ops the
// block scales: ~10 instructions per row and block, against ~45 in the
// row kernel, so one input is bound by memory, not by instructions. Each
// further input adds only its 64 + 16 (the unpacked weights stay in
// registers), so a 4-stream decode step costs little more than one. Prompts run
// 8 inputs per pass over a group (its 16 rows of one matrix stay in L1/L2).
// Sums are in the same order for every input count: an input's result does
// not depend on the others in the call.
// GCC 12's 512-bit intrinsics start from _mm512_undefined_*, which it then
// reports as "may be used uninitialized" (GCC bug 105593): a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstring>
#include <vector>

#include "../quant_blocks.h"
#include "kernels/repack.h"
#include "matmul_int8.h"

namespace moelsp::kernels {
namespace {

thread_local std::vector<BlockQ8K> tls_x;
thread_local std::vector<uint8_t> tls_rows;

#define RP_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Software prefetch, from two inputs on: each input adds ~80 vpdpbusd-bound
// instructions per block, so at 4 inputs a thread computes for ~300 cycles a
// 2.3 KB block and the hardware prefetcher, which follows the demand misses,
// stays too few lines ahead; one thread read 14 GB/s from memory, half what it
// computes on cached rows. Requesting the rows ~16 KB ahead (a block's lines
// in parts spread over its loop) brought that to 33-36 GB/s. At one input the
// loop is short and the stream is the prefetcher's best case: no gain there.
// Only the first pass over a group (`first`) requests: a prompt's later passes
// find the group's rows in L1/L2.
constexpr int kPrefetchFrom = 2;
constexpr size_t kPrefetchBytes = 16384;

// Requests part `part` of `parts` of the block whose bytes start
// kPrefetchBytes after `block`.
template <size_t Bytes, int Parts>
inline void prefetch_ahead(const void* block, int part) {
  const char* a = static_cast<const char*>(block) + kPrefetchBytes + size_t(part) * (Bytes / Parts);
  for (size_t l = 0; l < Bytes / Parts; l += 64) _mm_prefetch(a + l, _MM_HINT_T0);
}

// Inputs x[i·nb] (i < M) against one group of 16 rows; y[i·ldy + r] = row r's result;
// `first`: the first pass over these rows (they come from memory).
template <int M>
RP_TARGET void q4kx16(const blocks::Q4_Kx16* w, const BlockQ8K* x, int64_t nb, float* y, int64_t ldy, bool first) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  __m512 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const blocks::Q4_Kx16& k = w[b];
    __m512i sumi[M];
    for (int i = 0; i < M; ++i) sumi[i] = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      if (M >= kPrefetchFrom && first) prefetch_ahead<sizeof(k), 4>(&k, j);
      for (int h = 0; h < 2; ++h) {  // sub-block 2j (low nibbles), then 2j + 1 (high)
        __m512i q[8];
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) {
          const __m512i v = _mm512_loadu_si512(k.qs[j][t]);
          q[t] = _mm512_and_si512(h ? _mm512_srli_epi16(v, 4) : v, m4);
        }
        const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k.scales[2 * j + h])));
#pragma GCC unroll 8
        for (int i = 0; i < M; ++i) {
          const int8_t* xq = x[i * nb + b].q + 64 * j + 32 * h;
          // Two chains of four: vpdpbusd's latency would otherwise serialize one input.
          __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
          for (int t = 0; t < 8; t += 2) {
            s0 = _mm512_dpbusd_epi32(s0, q[t], _mm512_set1_epi32(load_i32(xq + 4 * t)));
            s1 = _mm512_dpbusd_epi32(s1, q[t + 1], _mm512_set1_epi32(load_i32(xq + 4 * t + 4)));
          }
          sumi[i] = _mm512_add_epi32(sumi[i], _mm512_mullo_epi32(_mm512_add_epi32(s0, s1), sc));
        }
      }
    }
    // Mins: lane r's int16 pair (min 2p, min 2p + 1) against the input's two 32-value sums.
    __m512i summ[M];
    int32_t bs[M][4];
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const int16_t* s = x[i * nb + b].bsums;
      const __m128i h = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)),
                                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 8)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bs[i]), h);
      summ[i] = _mm512_setzero_si512();
    }
    for (int p = 0; p < 4; ++p) {
      const __m512i mv = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.mins[p])));
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) summ[i] = _mm512_dpwssd_epi32(summ[i], mv, _mm512_set1_epi32(bs[i][p]));
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.d)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.dmin)));
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m512 xd = _mm512_set1_ps(x[i * nb + b].d);
      acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(d, xd), _mm512_cvtepi32_ps(sumi[i]), acc[i]);
      acc[i] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, xd), _mm512_cvtepi32_ps(summ[i]), acc[i]);
    }
  }
  for (int i = 0; i < M; ++i) _mm512_storeu_ps(y + i * ldy, acc[i]);
}

// Q6_K (blocks::Q6_Kx16): per 16-value group, four 6-bit vectors rebuilt by
// a shift, a mask and a bit-select each (vpternlogd: low nibble | two high
// bits at 4-5), four vpdpbusd and one vpmulld by the group's scale; the −32 of
// every value is Σ_g scale_g · 32 · (the input's 16-value sum), 8 vpdpwssd a block.
template <int M>
RP_TARGET void q6kx16(const blocks::Q6_Kx16* w, const BlockQ8K* x, int64_t nb, float* y, int64_t ldy, bool first) {
  const __m512i m0f = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
  // (A & C) | B: the low nibble of A, the high bits already masked in B.
  constexpr int kSelect = (0xF0 & 0xAA) | 0xCC;
  __m512 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const blocks::Q6_Kx16& k = w[b];
    __m512i sumi[M], summ[M];
    for (int i = 0; i < M; ++i) sumi[i] = summ[i] = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p) {
      if (M >= kPrefetchFrom && first) prefetch_ahead<sizeof(k), 8>(&k, p);
      // Lane r: the int16 pair (scale 2p, scale 2p + 1) of row r.
      const __m512i sc2 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.scales[p])));
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i)
        summ[i] = _mm512_dpwssd_epi32(summ[i], sc2, _mm512_set1_epi32(load_i32(x[i * nb + b].bsums + 2 * p)));
      for (int h = 0; h < 2; ++h) {
        const int grp = 2 * p + h;
        const __m512i sc = h ? _mm512_srai_epi32(sc2, 16) : _mm512_srai_epi32(_mm512_slli_epi32(sc2, 16), 16);
        const __m512i a = _mm512_loadu_si512(k.q[grp][0]), c = _mm512_loadu_si512(k.q[grp][1]);
        const __m512i hb = _mm512_loadu_si512(k.q[grp][2]);
        const __m512i q[4] = {
            _mm512_ternarylogic_epi32(a, _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30), m0f, kSelect),
            _mm512_ternarylogic_epi32(_mm512_srli_epi16(a, 4), _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30), m0f,
                                      kSelect),
            _mm512_ternarylogic_epi32(c, _mm512_and_si512(hb, m30), m0f, kSelect),
            _mm512_ternarylogic_epi32(_mm512_srli_epi16(c, 4), _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30), m0f,
                                      kSelect)};
#pragma GCC unroll 8
        for (int i = 0; i < M; ++i) {
          const int8_t* xq = x[i * nb + b].q + 16 * grp;
          __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[0], _mm512_set1_epi32(load_i32(xq)));
          __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[1], _mm512_set1_epi32(load_i32(xq + 4)));
          s0 = _mm512_dpbusd_epi32(s0, q[2], _mm512_set1_epi32(load_i32(xq + 8)));
          s1 = _mm512_dpbusd_epi32(s1, q[3], _mm512_set1_epi32(load_i32(xq + 12)));
          sumi[i] = _mm512_add_epi32(sumi[i], _mm512_mullo_epi32(_mm512_add_epi32(s0, s1), sc));
        }
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k.d)));
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const __m512i total = _mm512_sub_epi32(sumi[i], _mm512_slli_epi32(summ[i], 5));
      acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x[i * nb + b].d)), _mm512_cvtepi32_ps(total), acc[i]);
    }
  }
  for (int i = 0; i < M; ++i) _mm512_storeu_ps(y + i * ldy, acc[i]);
}

template <class Group>
using GroupKernel = void (*)(const Group*, const BlockQ8K*, int64_t, float*, int64_t, bool);
constexpr int kPassInputs = 8;
constexpr GroupKernel<blocks::Q4_Kx16> kQ4ByInputs[kPassInputs + 1] = {
    nullptr, q4kx16<1>, q4kx16<2>, q4kx16<3>, q4kx16<4>, q4kx16<5>, q4kx16<6>, q4kx16<7>, q4kx16<8>};
constexpr GroupKernel<blocks::Q6_Kx16> kQ6ByInputs[kPassInputs + 1] = {
    nullptr, q6kx16<1>, q6kx16<2>, q6kx16<3>, q6kx16<4>, q6kx16<5>, q6kx16<6>, q6kx16<7>, q6kx16<8>};

template <class Group>
void matmul_groups(const MatmulArgs& a, const GroupKernel<Group> (&by_inputs)[kPassInputs + 1]) {
  const int64_t nb = a.w.cols / 256;
  const auto* base = static_cast<const Group*>(a.w.data);
  const int64_t g0 = a.row_begin / kRepackRows, g1 = a.row_end / kRepackRows;
  by_chunks(a, nb, tls_x, quantize_row_q8_k_simd, [&](int64_t i0, int64_t i1, const BlockQ8K* xq) {
    for (int64_t g = g0; g < g1; ++g)
      for (int64_t i = i0; i < i1; i += kPassInputs) {
        const int n = int(std::min<int64_t>(kPassInputs, i1 - i));
        by_inputs[n](base + g * nb, xq + (i - i0) * nb, nb, a.y + i * a.ldy + g * kRepackRows, a.ldy, i == i0);
      }
  });
}

// The 32-value types (blocks::Q8_0x16, Q4_0x16, Q5_0x16, Q4_1x16, Q5_1x16):
// per block and 16 rows, 8 vectors of unsigned values (Q8_0 a load each; the
// others a mask or a shift and a mask, the fifth bits one masked byte add), 8
// vpdpbusd per input, the offset (Q8_0 128, Q4_0 8, Q5_0 16) times the input
// block's sum taken off, and one f32 multiply-add by the 16 rows' scales
// (Q4_1/Q5_1: a second one, their mins times the block's sum): a block's
// scale is per 32 values, so the float work is per block, not per 256.
template <DType T>
constexpr int kOffset = T == DType::Q8_0   ? 128
                        : T == DType::Q5_0 ? 16
                        : T == DType::Q4_0 ? 8
                                           : 0;
template <DType T>
constexpr bool kMin = T == DType::Q4_1 || T == DType::Q5_1;  // d · q + m
template <DType T>
constexpr bool kFifth = T == DType::Q5_0 || T == DType::Q5_1;
template <DType T>
constexpr size_t kGroupBlock = size_t(kRepackRows) * traits(T).type_size;
template <DType T>
constexpr size_t kQAt = kMin<T> ? 64 : 32;  // the values, after the scales (and mins)
template <DType T>
constexpr size_t kQhAt = T == DType::Q5_1 ? offsetof(blocks::Q5_1x16, qh) : offsetof(blocks::Q5_0x16, qh);

template <DType T, int M>
RP_TARGET void q32x16(const uint8_t* w, const BlockQ8* x, const int32_t* xsum, int64_t nb, float* y, int64_t ldy,
                      bool first) {
  const __m512i m0f = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
  __m512 acc[M];
  for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, w += kGroupBlock<T>) {
    if (M >= kPrefetchFrom && first) prefetch_ahead<kGroupBlock<T>, 1>(w, 0);
    __m512i u[8];
    if constexpr (T == DType::Q8_0) {
      for (int t = 0; t < 8; ++t) u[t] = _mm512_loadu_si512(w + 32 + 64 * t);
    } else {
      for (int t = 0; t < 4; ++t) {
        const __m512i v = _mm512_loadu_si512(w + kQAt<T> + 64 * t);
        u[t] = _mm512_and_si512(v, m0f);
        u[t + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f);
      }
      if constexpr (kFifth<T>)
        for (int t = 0; t < 8; ++t) {
          uint64_t mask;
          std::memcpy(&mask, w + kQhAt<T> + 8 * t, 8);
          u[t] = _mm512_mask_add_epi8(u[t], __mmask64(mask), u[t], sixteen);
        }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
    __m512 mins = _mm512_setzero_ps();
    if constexpr (kMin<T>) mins = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 32)));
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      const BlockQ8& xb = x[i * nb + b];
      __m512i s0 = _mm512_set1_epi32(-kOffset<T> * xsum[i * nb + b]), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int t = 0; t < 8; t += 2) {
        s0 = _mm512_dpbusd_epi32(s0, u[t], _mm512_set1_epi32(load_i32(xb.q + 4 * t)));
        s1 = _mm512_dpbusd_epi32(s1, u[t + 1], _mm512_set1_epi32(load_i32(xb.q + 4 * t + 4)));
      }
      acc[i] =
          _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(xb.d)), _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), acc[i]);
      if constexpr (kMin<T>)  // + m · Σx
        acc[i] = _mm512_fmadd_ps(mins, _mm512_set1_ps(xb.d * float(xsum[i * nb + b])), acc[i]);
    }
  }
  for (int i = 0; i < M; ++i) _mm512_storeu_ps(y + i * ldy, acc[i]);
}

template <DType T>
using Q32Kernel = void (*)(const uint8_t*, const BlockQ8*, const int32_t*, int64_t, float*, int64_t, bool);
template <DType T>
constexpr Q32Kernel<T> kQ32ByInputs[kPassInputs + 1] = {nullptr,      q32x16<T, 1>, q32x16<T, 2>,
                                                        q32x16<T, 3>, q32x16<T, 4>, q32x16<T, 5>,
                                                        q32x16<T, 6>, q32x16<T, 7>, q32x16<T, 8>};

thread_local std::vector<BlockQ8> tls_x8;
thread_local std::vector<int32_t> tls_xsum;

template <DType T>
void matmul_groups32(const MatmulArgs& a) {
  const int64_t nb = a.w.cols / 32;
  const auto* base = static_cast<const uint8_t*>(a.w.data);
  const int64_t g0 = a.row_begin / kRepackRows, g1 = a.row_end / kRepackRows;
  by_chunks(a, nb, tls_x8, quantize_row_q8_simd, [&](int64_t i0, int64_t i1, const BlockQ8* xq) {
    // Each input block's Σq, for the weights' offset.
    tls_xsum.resize(size_t((i1 - i0) * nb));
    for (int64_t k = 0; k < (i1 - i0) * nb; ++k) {
      int32_t s = 0;
      for (int v = 0; v < 32; ++v) s += xq[k].q[v];
      tls_xsum[size_t(k)] = s;
    }
    for (int64_t g = g0; g < g1; ++g)
      for (int64_t i = i0; i < i1; i += kPassInputs) {
        const int n = int(std::min<int64_t>(kPassInputs, i1 - i));
        kQ32ByInputs<T>[n](base + size_t(g * nb) * kGroupBlock<T>, xq + (i - i0) * nb, tls_xsum.data() + (i - i0) * nb,
                           nb, a.y + i * a.ldy + g * kRepackRows, a.ldy, i == i0);
      }
  });
}

}  // namespace

void matmul_repacked(const MatmulArgs& a, const KernelConfig& cfg) {
  if (cfg.isa >= Isa::Avx512Vnni && cfg.activations == Activations::Int8) {
    switch (a.w.type) {
      case DType::Q6_K: return matmul_groups<blocks::Q6_Kx16>(a, kQ6ByInputs);
      case DType::Q8_0: return matmul_groups32<DType::Q8_0>(a);
      case DType::Q5_0: return matmul_groups32<DType::Q5_0>(a);
      case DType::Q4_0: return matmul_groups32<DType::Q4_0>(a);
      case DType::Q4_1: return matmul_groups32<DType::Q4_1>(a);
      case DType::Q5_1: return matmul_groups32<DType::Q5_1>(a);
      default: return matmul_groups<blocks::Q4_Kx16>(a, kQ4ByInputs);
    }
  }
  // Another setting: each group unpacked to plain rows, computed as those rows would be.
  const size_t group_bytes = size_t(kRepackRows) * plain_row_bytes(a.w);
  if (tls_rows.size() < group_bytes) tls_rows.resize(group_bytes);
  for (int64_t g = a.row_begin / kRepackRows; g < a.row_end / kRepackRows; ++g) {
    unpack_group(a.w, g, tls_rows.data());
    MatmulArgs s = a;
    s.w.data = tls_rows.data();
    s.w.rows = kRepackRows;
    s.w.row_group = 1;
    s.w.row_bytes = plain_row_bytes(a.w);
    s.row_begin = 0;
    s.row_end = kRepackRows;
    s.y = a.y + g * kRepackRows;
    matmul_with(s, cfg);
  }
}

}  // namespace moelsp::kernels
