// Token sampling. Order (as llama.cpp's default chain): repetition /
// presence / frequency penalties over the last `penalty_last_n` tokens →
// top-k → top-p → min-p → temperature → draw. temperature ≤ 0 is greedy
// (argmax after penalties). The same seed gives the same draws.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/sampling_params.h"
#include "engine/tokenizer.h"

namespace moelsp {

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
