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

}  // namespace moelsp::kernels::blocks
