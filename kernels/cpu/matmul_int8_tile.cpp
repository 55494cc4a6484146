// Int8 prompt processing: inputs as vector lanes, weights broadcast.
//
// The decode kernels (matmul_int8.cpp) dot one weight row with one input at a
// time and pay, per 32-value block, a scale conversion, a horizontal-sum-free
// but still ~10-instruction multiply chain. With many inputs (prompt
// processing, or an expert's share of a batch) this kernel turns the product
// around: eight inputs' int8 activations are interleaved so that a 256-bit
// vector holds four consecutive values of each of eight inputs (one input per
// 32-bit lane), and each weight row contributes four values at a time as one
// 32-bit pattern broadcast to every lane. One vpdpbusd then performs 32
// multiply-adds that all land in the right place, with no shuffles and no
// horizontal sums; a group's scale is applied once per lane vector. Per 32
// weights × 8 inputs that is 8 vpdpbusd + ~3 float ops + the unpacking of the
// weights (shared by every lane vector of the tile): ~2 instructions per 32
// multiply-adds where the decode kernel needs ~10.
//
// vpdpbusd multiplies unsigned by signed bytes, so weights are made unsigned:
// Q8_0 by flipping the sign bit (q + 128), MXFP4 by a byte shuffle of its codes
// into value + 12, the 4/5/6-bit types are unsigned in the file. The offset
// comes back exactly as an integer: each lane's accumulator starts at
// −offset·Σ(the group's activations). Q4_K's min is a float term,
// −min·Σ(activations)·d_x per group.
//
// Two builds of the same body (matmul_int8_tile.inc): AVX-512 VNNI (vpdpbusd on
// 256-bit vectors, whose VL encoding also gives 32 registers: 4 rows × 2 lane
// vectors per tile) and AVX2 (maddubs + madd; exact only for unsigned weights
// ≤ 127, so Q8_0 stays on the decode kernel there; 2 × 2 tiles in 16 registers).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "../decode_blocks.h"
#include "../quant_blocks.h"
#include "decode_simd.h"
#include "kernels/convert.h"
#include "kernels/isa.h"
#include "matmul_int8.h"
#include "simd.h"

namespace moelsp::kernels {
namespace {

// Scale groups of each weight type: kSize values share a scale (and, for Q4_K, a
// min); stored values are unsigned with kOffset subtracted; activations come
// in kActBlock-value blocks (Q8_0's rule for 32, Q8_K's for 256); a
// super-block's kSuperGroups scales are decoded together.
struct Groups {
  int size, offset, act_block, super_groups;
  bool min;
};
// The types of decode_blocks.h: groups as their decoders define them.
template <DType T>
constexpr Groups groups_of_decoder() {
  using D = blocks::Decoder<T>;
  return {D::kGroup, D::kOffset, D::kElems, D::kElems / D::kGroup, D::kMin};
}
constexpr Groups decoded_groups(DType t) {
  switch (t) {
    case DType::Q4_1: return groups_of_decoder<DType::Q4_1>();
    case DType::Q5_1: return groups_of_decoder<DType::Q5_1>();
    case DType::Q2_K: return groups_of_decoder<DType::Q2_K>();
    case DType::Q3_K: return groups_of_decoder<DType::Q3_K>();
    case DType::IQ4_NL: return groups_of_decoder<DType::IQ4_NL>();
    case DType::IQ4_XS: return groups_of_decoder<DType::IQ4_XS>();
    case DType::IQ2_XXS: return groups_of_decoder<DType::IQ2_XXS>();
    case DType::IQ2_XS: return groups_of_decoder<DType::IQ2_XS>();
    case DType::IQ2_S: return groups_of_decoder<DType::IQ2_S>();
    case DType::IQ3_XXS: return groups_of_decoder<DType::IQ3_XXS>();
    case DType::IQ3_S: return groups_of_decoder<DType::IQ3_S>();
    case DType::IQ1_S: return groups_of_decoder<DType::IQ1_S>();
    case DType::IQ1_M: return groups_of_decoder<DType::IQ1_M>();
    default: return {0, 0, 0, 0, false};
  }
}

// One row per type: it reads as the table it is.
// clang-format off
constexpr Groups groups_of(DType t) {
  switch (t) {
    //                       size offset act_block super_groups min
    case DType::Q8_0: return {32,  128,   32,       1,           false};
    case DType::Q4_0: return {32,  8,     32,       1,           false};
    case DType::Q5_0: return {32,  16,    32,       1,           false};
    case DType::Q4_K: return {32,  0,     256,      8,           true};
    case DType::Q5_K: return {32,  0,     256,      8,           true};
    case DType::Q6_K: return {16,  32,    256,      16,          false};
    case DType::MXFP4: return {32, 12,    32,       1,           false};
    default:          return decoded_groups(t);
  }
}
// clang-format on
template <DType T>
struct GroupOf {
  static constexpr Groups g = groups_of(T);
  static_assert(g.size > 0, "no int8 tile kernel for this type");
  static constexpr int kSize = g.size, kOffset = g.offset, kActBlock = g.act_block, kSuperGroups = g.super_groups;
  static constexpr bool kMin = g.min;
};

// Q5_0's high bits: 4 bits → 4 bytes, byte j = 16 if bit j is set.
constexpr uint32_t spread16(uint32_t n) {
  uint32_t r = 0;
  for (int j = 0; j < 4; ++j)
    if ((n >> j) & 1) r |= 0x10u << (8 * j);
  return r;
}
constexpr uint32_t kSpread16[16] = {spread16(0),  spread16(1),  spread16(2),  spread16(3), spread16(4),  spread16(5),
                                    spread16(6),  spread16(7),  spread16(8),  spread16(9), spread16(10), spread16(11),
                                    spread16(12), spread16(13), spread16(14), spread16(15)};

// MXFP4's values made unsigned for vpdpbusd: kMxfp4Values + 12 (its kOffset), in
// both 128-bit halves (byte shuffles index within each half).
struct Mxfp4Unsigned {
  alignas(32) uint8_t v[32];
  constexpr Mxfp4Unsigned() : v{} {
    for (int i = 0; i < 32; ++i) v[i] = uint8_t(blocks::kMxfp4Values[i % 16] + 12);
  }
};
constexpr Mxfp4Unsigned kMxfp4Unsigned;

// A chunk's activations as lane vectors (v = input / 8, lane l = input % 8).
struct Lanes {
  // [n_vec][n_units][8 lanes][4 bytes]: values 4u..4u+3 of each lane's input;
  // lane vector v starts at x + v·vstride (padded: see pack_lanes).
  const uint8_t* x;
  const int32_t* corr;  // [n_vec][n_groups][8]: −kOffset · Σ the group's values
  const float* dx;      // [n_vec][n_groups][8]: scale of the activation block holding the group
  const float* sx;      // [n_vec][n_groups][8]: Σ the group's values · dx (Q4_K's min term)
  int64_t n_units, n_groups, n_vec;
  size_t vstride;
};

struct LaneBuffers {
  std::vector<uint8_t> x;
  std::vector<int32_t> corr;
  std::vector<float> dx, sx;
};
thread_local LaneBuffers tls_lanes;

// Interleaves m inputs' quantized blocks (input i's at xq + i·nb). Lanes past
// m are zero, so they add nothing and their outputs are dropped.
template <DType T, class Block>
Lanes pack_lanes(const Block* xq, int64_t nb, int64_t m, int64_t cols) {
  constexpr int kG = GroupOf<T>::kSize, kB = GroupOf<T>::kActBlock;
  const int64_t n_vec = (m + 7) / 8, n_units = cols / 4, n_groups = cols / kG;
  LaneBuffers& b = tls_lanes;
  // Lane vectors 16 KB apart (2048 columns) would share L1 sets with each
  // other; a 192-byte pad staggers them.
  const size_t vstride = size_t(n_units * 32 + 192);
  b.x.assign(size_t(n_vec) * vstride, 0);
  b.corr.assign(size_t(n_vec * n_groups * 8), 0);
  b.dx.assign(size_t(n_vec * n_groups * 8), 0.0f);
  if (GroupOf<T>::kMin) b.sx.assign(size_t(n_vec * n_groups * 8), 0.0f);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t v = i / 8, l = i % 8;
    const Block* in = xq + i * nb;
    uint8_t* xv = b.x.data() + size_t(v) * vstride + size_t(4 * l);
    for (int64_t u = 0; u < n_units; ++u) std::memcpy(xv + 32 * u, in[(4 * u) / kB].q + (4 * u) % kB, 4);
    for (int64_t g = 0; g < n_groups; ++g) {
      const Block& blk = in[(g * kG) / kB];
      const int8_t* q = blk.q + (g * kG) % kB;
      int32_t s = 0;
      for (int e = 0; e < kG; ++e) s += q[e];
      const size_t at = size_t((v * n_groups + g) * 8 + l);
      b.corr[at] = -GroupOf<T>::kOffset * s;
      b.dx[at] = blk.d;
      if (GroupOf<T>::kMin) b.sx[at] = float(s) * blk.d;
    }
  }
  return {b.x.data(), b.corr.data(), b.dx.data(), b.sx.data(), n_units, n_groups, n_vec, vstride};
}

// The decode_blocks.h types are decoded once per group of R weight rows (into
// a thread's buffer, L1-sized: R rows × columns bytes) and then read by every
// lane vector of the chunk; decoding per tile instead would repeat the
// scalar decode for each 8-16 inputs. A decoded super-block is a record:
// its kSuperGroups scales, then (kMin) its mins, as floats, then its weights
// made unsigned (q + kOffset), one byte each.
template <DType T>
struct DecodedLayout {
  static constexpr int kGroups = GroupOf<T>::kSuperGroups, kElems = GroupOf<T>::kActBlock;
  static constexpr size_t kFloats = size_t(kGroups) * (GroupOf<T>::kMin ? 2 : 1);
  static constexpr size_t kRecord = kFloats * sizeof(float) + size_t(kElems);
};
thread_local std::vector<uint8_t> tls_decoded;

// One row's super-blocks as records (the tile kernel runs at AVX2 or above).
template <class D, class L>
__attribute__((target("avx2,fma,f16c"))) void decode_row_records(const uint8_t* src, int64_t nsb, uint8_t* dst) {
  alignas(32) int8_t q[D::kElems];
  float f[L::kFloats];
  const __m256i offset = _mm256_set1_epi8(char(D::kOffset));  // q + kOffset ≤ 255: unsigned bytes
  for (int64_t sb = 0; sb < nsb; ++sb, src += traits(D::kType).type_size, dst += L::kRecord) {
    blocks::simd_decode::decode<D>(src, q, f, f + L::kGroups);
    std::memcpy(dst, f, L::kFloats * sizeof(float));
    for (int e = 0; e < D::kElems; e += 32)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + L::kFloats * sizeof(float) + size_t(e)),
                          _mm256_add_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(q + e)), offset));
  }
}

// Q8_0's and Q5_0's records: the block's scale, then its 32 weights as the
// unsigned bytes Unpack<T, false>::units broadcasts (Q8_0 + 128, Q5_0's
// nibble and fifth bit).
template <DType T>
__attribute__((target("avx2,fma,f16c"))) void block_records(const uint8_t* src, int64_t nb, uint8_t* dst) {
  static_assert(T == DType::Q8_0 || T == DType::Q5_0);
  namespace sd = blocks::simd_decode;
  for (int64_t b = 0; b < nb; ++b, src += traits(T).type_size, dst += DecodedLayout<T>::kRecord) {
    const float d = simd::half_at(src);
    std::memcpy(dst, &d, sizeof d);
    __m256i u;
    if constexpr (T == DType::Q8_0)
      u = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + offsetof(blocks::Q8_0, qs))),
                           _mm256_set1_epi8(char(0x80)));
    else
      u = _mm256_or_si256(sd::nibbles(src + offsetof(blocks::Q5_0, qs)),
                          sd::bits_to_16(blocks::detail::u32_at(src + offsetof(blocks::Q5_0, qh))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + sizeof d), u);
  }
}

// Types whose tiles may read predecoded records instead of the file's
// blocks: every decode_blocks.h type always, and Q8_0 and Q5_0 when a row
// group meets more than one tile of inputs (their per-tile unpacking, a
// sign flip per unit and Q5_0's fifth-bit lookups, is then done once per
// row group). Measured with moelsp_bench_kernels, 768 × 2048, 64 and 512
// inputs, VNNI, old and new builds alternated twice: Q5_0 71-90 → 95-109
// GMAC/s, Q8_0 94-101 → 108-115; Q4_0 unchanged, and the K-quants 20-30 %
// slower (their 4 × 4 tiles already share one unpack among 32 inputs), so
// they stay direct.
constexpr bool tile_predecodes(DType t) { return t == DType::Q8_0 || t == DType::Q5_0 || blocks::is_decoded(t); }

// Rows r0 .. r0 + n − 1 of w decoded, as a view whose rows are records.
template <DType T>
MatView decode_rows(const MatView& w, int64_t r0, int64_t n) {
  using L = DecodedLayout<T>;
  const int64_t nsb = w.cols / L::kElems;
  const size_t row_bytes = size_t(nsb) * L::kRecord;
  if (tls_decoded.size() < size_t(n) * row_bytes) tls_decoded.resize(size_t(n) * row_bytes);
  for (int64_t r = 0; r < n; ++r) {
    uint8_t* dst = tls_decoded.data() + size_t(r) * row_bytes;
    if constexpr (blocks::is_decoded(T)) decode_row_records<blocks::Decoder<T>, L>(w.row(r0 + r), nsb, dst);
    else block_records<T>(w.row(r0 + r), nsb, dst);
  }
  return MatView{tls_decoded.data(), T, w.cols, n, row_bytes};
}

#define TILE_NS vnni
#define TILE_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define TILE_VNNI 1
#include "matmul_int8_tile.inc"
#undef TILE_NS
#undef TILE_TARGET
#undef TILE_VNNI

#define TILE_NS avx2
#define TILE_TARGET __attribute__((target("avx2,fma,f16c")))
#define TILE_VNNI 0
#include "matmul_int8_tile.inc"
#undef TILE_NS
#undef TILE_TARGET
#undef TILE_VNNI

template <DType T, class Block>
void tile_chunk(const MatmulArgs& a, int64_t i0, int64_t i1, const Block* xq, int64_t nb, Isa isa) {
  const Lanes L = pack_lanes<T>(xq, nb, i1 - i0, a.w.cols);
  // Tile shapes measured with bench/moelsp_bench_kernels on Zen 4: the
  // 32-value-block types run best at 4 rows × 2 lane vectors (4 × 4 was ~25%
  // slower for Q8_0 at 32 inputs), the K-quants at 4 × 4 (~10% over 4 × 2;
  // 2 × 4, which spills no accumulators, and 4 × 3 were no better).
  constexpr int kNV = traits(T).block_size == 256 ? 4 : 2;
  if (isa >= Isa::Avx512Vnni) vnni::run<T, 4, kNV>(a, L, i0, i1 - i0);
  else avx2::run<T, 2, 2>(a, L, i0, i1 - i0);
}

}  // namespace

bool int8_tile_supports(DType t, int64_t m, Isa level) {
  if (m < kTileMinInputs) return false;
  if (traits(t).kernel != Kernel::Int8) return false;
  // AVX2's maddubs saturates past 127 · 127 · 2, so types whose unsigned values
  // exceed 127 (Q8_0 + 128, IQ4's table + 128) stay with the row-streaming
  // kernels there (Q8_0's tile also measured no faster there).
  const Groups g = groups_of(t);
  if (g.size == 0) return false;
  return level >= Isa::Avx512Vnni || (level >= Isa::Avx2 && g.offset < 128);
}

void matmul_int8_tile(const MatmulArgs& a, int64_t i0, int64_t i1, const BlockQ8* xq, Isa isa) {
  const int64_t nb = a.w.cols / 32;
  switch (a.w.type) {
    case DType::Q8_0: return tile_chunk<DType::Q8_0>(a, i0, i1, xq, nb, isa);
    case DType::Q4_0: return tile_chunk<DType::Q4_0>(a, i0, i1, xq, nb, isa);
    case DType::MXFP4: return tile_chunk<DType::MXFP4>(a, i0, i1, xq, nb, isa);
    case DType::Q5_0: return tile_chunk<DType::Q5_0>(a, i0, i1, xq, nb, isa);
    default:
      return blocks::with_decoder(a.w.type, [&](auto d) {
        if constexpr (decltype(d)::kElems == 32) tile_chunk<decltype(d)::kType>(a, i0, i1, xq, nb, isa);
      });
  }
}

void matmul_int8_tile(const MatmulArgs& a, int64_t i0, int64_t i1, const BlockQ8K* xq, Isa isa) {
  const int64_t nb = a.w.cols / 256;
  switch (a.w.type) {
    case DType::Q4_K: return tile_chunk<DType::Q4_K>(a, i0, i1, xq, nb, isa);
    case DType::Q5_K: return tile_chunk<DType::Q5_K>(a, i0, i1, xq, nb, isa);
    case DType::Q6_K: return tile_chunk<DType::Q6_K>(a, i0, i1, xq, nb, isa);
    default:
      return blocks::with_decoder(a.w.type, [&](auto d) {
        if constexpr (decltype(d)::kElems == 256) tile_chunk<decltype(d)::kType>(a, i0, i1, xq, nb, isa);
      });
  }
}

}  // namespace moelsp::kernels
