// Token sampling. Order (as llama.cpp's default chain): repetition /
// presence / frequency penalties over the last `penalty_last_n` tokens →
// top-k → top-p → min-p → temperature → draw. temperature ≤ 0 is greedy
// (argmax after penalties). The same seed gives the same draws.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/tokenizer.h"

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

class Sampler {
 public:
  Sampler(const SamplingParams& p, int n_vocab);
  // `history`: prompt and generated tokens so far (for the penalties).
  TokenId sample(const float* logits, std::span<const TokenId> history);

 private:
  SamplingParams p_;
  int n_vocab_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, TokenId>> cand_;
};

}  // namespace moelsp
