// The experts' activations, written once for the host and the CUDA device:
// the CPU engine's FFN (engine/layers/ffn.cpp), the device pass's CPU experts
// (engine/device/forward.cpp), the host emulation of the device and the
// CUDA kernel all call these, so gpt-oss's constants live in one place.
#pragma once

#include "kernels/hd_route.h"  // MOELSP_HD, exp_f

namespace moelsp::kernels::hd {

// gpt-oss's SwiGLU: the gate clamped from above and the up projection on
// both sides at ±kOaiLimit, a sigmoid of α·g, and (u + 1).
inline constexpr float kOaiLimit = 7.0f;
inline constexpr float kOaiAlpha = 1.702f;

MOELSP_HD float swiglu_oai(float g, float u) {
  const float gv = kOaiLimit < g ? kOaiLimit : g;  // std::min(g, 7): NaN stays NaN
  const float uv = u < -kOaiLimit ? -kOaiLimit : (u > kOaiLimit ? kOaiLimit : u);
  return gv / (1.0f + exp_f(-kOaiAlpha * gv)) * (uv + 1.0f);
}

// The usual SwiGLU: silu(g) · u.
MOELSP_HD float swiglu(float g, float u) { return g / (1.0f + exp_f(-g)) * u; }

}  // namespace moelsp::kernels::hd
