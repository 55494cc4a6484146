// Perplexity of a model on a token sequence, with sliding windows.
//
// Windows of `ctx` tokens (BOS first when the vocabulary asks for it) advance
// by `stride`; each window scores only the tokens no earlier window scored, so
// every token after the first is scored exactly once, with at least
// ctx - stride tokens of context once the first window is past. The trainer of
// the default model (tools/train-default-model/evaluate.py) computes the same
// quantity, token for token, which is what makes the two comparable.
#pragma once

#include <functional>
#include <span>

#include "engine/kv_type.h"
#include "engine/tokenizer.h"

namespace moelsp {

class Model;

struct PerplexityParams {
  int ctx = 512;
  int stride = 0;       // 0: ctx / 2
  int max_windows = 0;  // 0: the whole sequence
  KvType kv_type = KvType::F16;
};

struct PerplexityResult {
  double nll = 0;      // summed negative log-likelihood, nats
  int64_t scored = 0;  // tokens scored
  int windows = 0;
  int total_windows = 0;  // the run's, known from the start (progress)
  int ctx = 0, stride = 0;
  double nats_per_token() const { return scored ? nll / double(scored) : 0.0; }
  double perplexity() const;
};

// Called after every window with the running result.
using PerplexityProgress = std::function<void(const PerplexityResult&)>;

// Throws std::invalid_argument for fewer than 2 tokens or a window under 2.
PerplexityResult perplexity(Model& model, std::span<const TokenId> tokens, const PerplexityParams& params,
                            const PerplexityProgress& progress = {});

}  // namespace moelsp
