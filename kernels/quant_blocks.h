// Helpers shared by the reference and SIMD block decoders (internal to kernels/).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/convert.h"

namespace moelsp::kernels::blocks {

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block `sub` (0..7) packed in 12 bytes.
inline void k4_scale_min(const uint8_t* sc, int sub, int* scale, int* min) {
  if (sub < 4) {
    *scale = sc[sub] & 63;
    *min = sc[sub + 4] & 63;
  } else {
    *scale = (sc[sub + 4] & 0x0f) | ((sc[sub - 4] >> 6) << 4);
    *min = (sc[sub + 4] >> 4) | ((sc[sub] >> 6) << 4);
  }
}

// Q4_K's twelve scale bytes → eight 6-bit scales (bytes 0-7 of the result)
// and eight 6-bit mins (bytes 8-15), with 32-bit masks instead of a per-sub-block
// branch (the layout is k4_scale_min's).
inline void k4_unpack_scales(const uint8_t* sc, uint32_t out[4]) {
  uint32_t u[3];
  std::memcpy(u, sc, 12);
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kTop2 = 0x03030303;
  out[0] = u[0] & kLow6;                                          // scales 0-3
  out[1] = (u[2] & kLow4) | (((u[0] >> 6) & kTop2) << 4);         // scales 4-7
  out[2] = u[1] & kLow6;                                          // mins 0-3
  out[3] = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kTop2) << 4);  // mins 4-7
}

}  // namespace moelsp::kernels::blocks
