// How a request samples its tokens (engine/sampling.h has the sampler): a
// header of its own so that code which only builds requests does not pull in
// <random>.
#pragma once

#include <cstdint>

namespace moelsp {

struct SamplingParams {
  float temperature = 0.8f;
  int top_k = 40;                  // 0: off
  float top_p = 0.95f;             // 1: off
  float min_p = 0.05f;             // 0: off
  float repeat_penalty = 1.0f;     // 1: off (llama.cpp's rule: divide positive logits, multiply negative)
  float presence_penalty = 0.0f;   // subtracted once from every logit of a token already seen
  float frequency_penalty = 0.0f;  // subtracted per occurrence
  int penalty_last_n = 64;         // window for the penalties (-1: whole history)
  uint64_t seed = 0;

  static SamplingParams greedy() {
    SamplingParams p;
    p.temperature = 0;
    return p;
  }
};

}  // namespace moelsp
