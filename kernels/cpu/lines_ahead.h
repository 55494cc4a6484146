// LinesAhead (kernels/matmul.h) spread over a kernel's steps: `per` lines a
// step, from p, until `left` run out. The AVX-512 tiles of the scores and P·V
// kernels copy p and left into locals for their loop (a reference would be
// loaded and stored around every step) and write them back after it.
#pragma once

#include <cstdint>

#include "kernels/matmul.h"

namespace moelsp::kernels::detail {

struct Spread {
  const uint8_t* p = nullptr;
  int64_t left = 0, per = 0;
};

// a's lines over `steps` steps (at least one).
inline Spread spread(const LinesAhead& a, int64_t steps) {
  return {.p = a.p, .left = a.lines, .per = (a.lines + steps - 1) / steps};
}

__attribute__((always_inline)) inline void spread_step(const uint8_t*& p, int64_t& left, int64_t per) {
  for (int64_t i = 0; i < per && left > 0; ++i, --left, p += 64) __builtin_prefetch(p);
}

}  // namespace moelsp::kernels::detail
