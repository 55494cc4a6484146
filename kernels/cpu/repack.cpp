// Repacking Q4_K rows into blocks::Q4_Kx16 groups and back (kernels/repack.h).
// Byte moves only: the nibbles keep their bytes (row r's qs[32j + 4t + b] is
// lane r, byte b of vector qs[j][t]); the 6-bit scales and mins are unpacked
// into bytes and packed back bit for bit.
#include <cassert>
#include <cstring>

#include "../quant_blocks.h"
#include "kernels/isa.h"
#include "kernels/repack.h"

namespace moelsp::kernels {
namespace {

// Bytes of one group's block: 16 plain blocks, and the Q4_K group's unpacked scales.
size_t group_block_bytes(DType t) {
  return t == DType::Q4_K ? sizeof(blocks::Q4_Kx16) : size_t(kRepackRows) * traits(t).type_size;
}

bool repackable_shape(const MatView& w) {
  const DType t = w.type;
  const int64_t bs = traits(t).block_size;
  return (t == DType::Q4_K || t == DType::Q6_K || t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q5_0 ||
          t == DType::Q4_1 || t == DType::Q5_1) &&
         w.row_group == 1 && w.rows > 0 && w.rows % kRepackRows == 0 && w.cols > 0 && w.cols % bs == 0 &&
         w.row_bytes == size_t(w.cols / bs) * traits(t).type_size;
}

int64_t blocks_per_row(const MatView& w) { return w.cols / int64_t(traits(w.type).block_size); }

// k4_scale_min's inverse: the 12 bytes holding these eight scales and mins.
void pack_scales(const uint8_t scale[8], const uint8_t min[8], uint8_t sc[12]) {
  std::memset(sc, 0, 12);
  for (int s = 0; s < 4; ++s) {
    sc[s] = scale[s];
    sc[s + 4] = min[s];
  }
  for (int s = 4; s < 8; ++s) {
    sc[s + 4] = uint8_t((scale[s] & 0x0f) | ((min[s] & 0x0f) << 4));
    sc[s - 4] |= uint8_t((scale[s] >> 4) << 6);
    sc[s] |= uint8_t((min[s] >> 4) << 6);
  }
}

}  // namespace

bool repack_supported(const MatView& w) {
  const KernelConfig cfg = kernel_config();
  return repackable_shape(w) && cfg.isa >= Isa::Avx512Vnni && cfg.activations == Activations::Int8;
}

size_t plain_row_bytes(const MatView& w) { return size_t(blocks_per_row(w)) * traits(w.type).type_size; }

size_t repacked_bytes(const MatView& w) {
  return size_t(w.rows / kRepackRows) * size_t(blocks_per_row(w)) * group_block_bytes(w.type);
}

namespace {

void repack_q6_k(const MatView& w, blocks::Q6_Kx16* out, int64_t g0, int64_t g1) {
  const int64_t nb = w.cols / 256;
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t b = 0; b < nb; ++b) {
      blocks::Q6_Kx16& o = out[g * nb + b];
      for (int r = 0; r < kRepackRows; ++r) {
        blocks::Q6_K in;
        std::memcpy(&in, w.row(g * kRepackRows + r) + b * sizeof(blocks::Q6_K), sizeof in);
        o.d[r] = in.d;
        for (int s = 0; s < 16; ++s) o.scales[s / 2][r][s % 2] = in.scales[s];
        uint8_t v[256];  // the block's 6-bit values, in ggml's order of ql/qh
        for (int n = 0; n < 2; ++n)
          for (int l = 0; l < 32; ++l) {
            const uint8_t lo0 = in.ql[64 * n + l], lo1 = in.ql[64 * n + l + 32], hi = in.qh[32 * n + l];
            v[128 * n + l] = uint8_t((lo0 & 15) | (hi & 3) << 4);
            v[128 * n + l + 32] = uint8_t((lo1 & 15) | ((hi >> 2) & 3) << 4);
            v[128 * n + l + 64] = uint8_t((lo0 >> 4) | ((hi >> 4) & 3) << 4);
            v[128 * n + l + 96] = uint8_t((lo1 >> 4) | ((hi >> 6) & 3) << 4);
          }
        for (int grp = 0; grp < 16; ++grp)
          for (int k = 0; k < 4; ++k) {
            const uint8_t* c = v + 16 * grp + k;  // chunk c's value k at c[4·chunk]
            o.q[grp][0][r][k] = uint8_t((c[0] & 15) | (c[4] & 15) << 4);
            o.q[grp][1][r][k] = uint8_t((c[8] & 15) | (c[12] & 15) << 4);
            o.q[grp][2][r][k] = uint8_t(c[0] >> 4 | (c[4] >> 4) << 2 | (c[8] >> 4) << 4 | (c[12] >> 4) << 6);
          }
      }
    }
}

void unpack_q6_k(const MatView& w, int64_t g, uint8_t* dst) {
  const int64_t nb = w.cols / 256;
  const auto* in = static_cast<const blocks::Q6_Kx16*>(w.data) + g * nb;
  for (int64_t b = 0; b < nb; ++b)
    for (int r = 0; r < kRepackRows; ++r) {
      blocks::Q6_K o{};
      o.d = in[b].d[r];
      for (int s = 0; s < 16; ++s) o.scales[s] = in[b].scales[s / 2][r][s % 2];
      for (int grp = 0; grp < 16; ++grp)
        for (int k = 0; k < 4; ++k)
          for (int c = 0; c < 4; ++c) {
            const int lo = (in[b].q[grp][c / 2][r][k] >> (4 * (c % 2))) & 15;
            const int hi = (in[b].q[grp][2][r][k] >> (2 * c)) & 3;
            blocks::q6_k_set_value(o, 16 * grp + 4 * c + k, lo | hi << 4);
          }
      std::memcpy(dst + size_t(r) * plain_row_bytes(w) + size_t(b) * sizeof o, &o, sizeof o);
    }
}

// Where a 32-value type keeps its fields in a plain block and in a group
// block (blocks::Q8_0x16, …): the min (Q4_1/Q5_1), the values, the fifth bits.
struct Q32Layout {
  size_t m_at = 0, qs_at, qh_at = 0;  // plain block (0: none)
  size_t out_q, out_qh = 0;           // group block
  int chunks;                         // 4-byte words of values per row
  bool flip;                          // Q8_0: q + 128
};
Q32Layout q32_layout(DType t) {
  switch (t) {
    case DType::Q8_0: return {.qs_at = 2, .out_q = 32, .chunks = 8, .flip = true};
    case DType::Q5_0:
      return {.qs_at = offsetof(blocks::Q5_0, qs),
              .qh_at = offsetof(blocks::Q5_0, qh),
              .out_q = 32,
              .out_qh = offsetof(blocks::Q5_0x16, qh),
              .chunks = 4,
              .flip = false};
    case DType::Q4_1:
      return {.m_at = offsetof(blocks::Q4_1, m),
              .qs_at = offsetof(blocks::Q4_1, qs),
              .out_q = 64,
              .chunks = 4,
              .flip = false};
    case DType::Q5_1:
      return {.m_at = offsetof(blocks::Q5_1, m),
              .qs_at = offsetof(blocks::Q5_1, qs),
              .qh_at = offsetof(blocks::Q5_1, qh),
              .out_q = 64,
              .out_qh = offsetof(blocks::Q5_1x16, qh),
              .chunks = 4,
              .flip = false};
    default: return {.qs_at = offsetof(blocks::Q4_0, qs), .out_q = 32, .chunks = 4, .flip = false};
  }
}

// The 32-value types: one group block (16 plain blocks' bytes) from 16 rows' block b, or back.
// Whole 4-byte chunks move as words (Q8_0's +128 is a sign-bit flip of each byte).
void repack_q32(DType t, const uint8_t* const in[kRepackRows], uint8_t* out) {
  const Q32Layout L = q32_layout(t);
  uint64_t masks[8] = {};
  for (int r = 0; r < kRepackRows; ++r) {
    const uint8_t* b = in[r];
    std::memcpy(out + 2 * r, b, 2);  // d: first in every block
    if (L.m_at) std::memcpy(out + 32 + 2 * r, b + L.m_at, 2);
    for (int c = 0; c < L.chunks; ++c) {
      uint32_t word;
      std::memcpy(&word, b + L.qs_at + 4 * c, 4);
      if (L.flip) word ^= 0x80808080u;
      std::memcpy(out + L.out_q + 64 * c + 4 * r, &word, 4);
    }
    if (L.qh_at) {
      uint32_t qh;
      std::memcpy(&qh, b + L.qh_at, 4);
      for (int c = 0; c < 8; ++c) masks[c] |= uint64_t((qh >> (4 * c)) & 15) << (4 * r);
    }
  }
  if (L.qh_at) std::memcpy(out + L.out_qh, masks, sizeof masks);
}

void unpack_q32(DType t, const uint8_t* in, uint8_t* const out[kRepackRows]) {
  const Q32Layout L = q32_layout(t);
  uint64_t masks[8];
  if (L.qh_at) std::memcpy(masks, in + L.out_qh, sizeof masks);
  for (int r = 0; r < kRepackRows; ++r) {
    uint8_t* b = out[r];
    std::memcpy(b, in + 2 * r, 2);
    if (L.m_at) std::memcpy(b + L.m_at, in + 32 + 2 * r, 2);
    for (int c = 0; c < L.chunks; ++c) {
      uint32_t word;
      std::memcpy(&word, in + L.out_q + 64 * c + 4 * r, 4);
      if (L.flip) word ^= 0x80808080u;
      std::memcpy(b + L.qs_at + 4 * c, &word, 4);
    }
    if (L.qh_at) {
      uint32_t qh = 0;
      for (int c = 0; c < 8; ++c) qh |= uint32_t(masks[c] >> (4 * r) & 15) << (4 * c);
      std::memcpy(b + L.qh_at, &qh, 4);
    }
  }
}

}  // namespace

MatView repacked_view(const MatView& w, void* dst) {
  MatView v = w;
  v.data = dst;
  v.row_group = kRepackRows;
  v.row_bytes = size_t(blocks_per_row(w)) * group_block_bytes(w.type) / kRepackRows;
  return v;
}

void repack_groups(const MatView& w, void* dst, int64_t g0, int64_t g1) {
  assert(repackable_shape(w));
  if (w.type != DType::Q4_K && w.type != DType::Q6_K) {
    const int64_t nb = blocks_per_row(w), bb = int64_t(traits(w.type).type_size);
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t g = g0; g < g1; ++g)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* in[kRepackRows];
        for (int r = 0; r < kRepackRows; ++r) in[r] = w.row(g * kRepackRows + r) + b * bb;
        repack_q32(w.type, in, out + size_t(g * nb + b) * group_block_bytes(w.type));
      }
    return;
  }
  if (w.type == DType::Q6_K) return repack_q6_k(w, static_cast<blocks::Q6_Kx16*>(dst), g0, g1);
  const int64_t nb = w.cols / 256;
  auto* out = static_cast<blocks::Q4_Kx16*>(dst);
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t b = 0; b < nb; ++b) {
      blocks::Q4_Kx16& o = out[g * nb + b];
      for (int r = 0; r < kRepackRows; ++r) {
        blocks::Q4_K in;
        std::memcpy(&in, w.row(g * kRepackRows + r) + b * sizeof(blocks::Q4_K), sizeof in);
        o.d[r] = in.d;
        o.dmin[r] = in.dmin;
        for (int s = 0; s < 8; ++s) {
          int scale, min;
          blocks::k4_scale_min(in.scales, s, &scale, &min);
          o.scales[s][r] = uint8_t(scale);
          o.mins[s / 2][r][s % 2] = uint8_t(min);
        }
        for (int j = 0; j < 4; ++j)
          for (int t = 0; t < 8; ++t) std::memcpy(o.qs[j][t][r], in.qs + 32 * j + 4 * t, 4);
      }
    }
}

MatView repack(const MatView& w, void* dst) {
  repack_groups(w, dst, 0, w.rows / kRepackRows);
  return repacked_view(w, dst);
}

void unpack_group(const MatView& w, int64_t g, uint8_t* dst) {
  assert(w.row_group == kRepackRows);
  if (w.type == DType::Q6_K) return unpack_q6_k(w, g, dst);
  if (w.type != DType::Q4_K) {
    const int64_t nb = blocks_per_row(w), bb = int64_t(traits(w.type).type_size);
    const auto* in = static_cast<const uint8_t*>(w.data) + size_t(g * nb) * group_block_bytes(w.type);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out[kRepackRows];
      for (int r = 0; r < kRepackRows; ++r) out[r] = dst + size_t(r) * plain_row_bytes(w) + size_t(b * bb);
      unpack_q32(w.type, in + size_t(b) * group_block_bytes(w.type), out);
    }
    return;
  }
  const int64_t nb = w.cols / 256;
  const auto* in = static_cast<const blocks::Q4_Kx16*>(w.data) + g * nb;
  for (int64_t b = 0; b < nb; ++b)
    for (int r = 0; r < kRepackRows; ++r) {
      blocks::Q4_K o;
      o.d = in[b].d[r];
      o.dmin = in[b].dmin[r];
      uint8_t scale[8], min[8];
      for (int s = 0; s < 8; ++s) scale[s] = in[b].scales[s][r], min[s] = in[b].mins[s / 2][r][s % 2];
      pack_scales(scale, min, o.scales);
      for (int j = 0; j < 4; ++j)
        for (int t = 0; t < 8; ++t) std::memcpy(o.qs + 32 * j + 4 * t, in[b].qs[j][t][r], 4);
      std::memcpy(dst + size_t(r) * plain_row_bytes(w) + size_t(b) * sizeof o, &o, sizeof o);
    }
}

}  // namespace moelsp::kernels
