// Which experts the next layers will want.
//
// At layer l's FFN input the residual stream already carries most of what
// layer l+d's router will see (each layer adds a small update to it), so
// layer l+d's own router applied to it — after layer l+d's FFN norm — picks
// mostly the same experts. That costs one n_embd × n_expert matmul per token
// and layer (0.7% of a Qwen3-30B-A3B layer's expert work). Where the previous
// token's experts at l+d have predicted better so far (routing that changes
// little between tokens), those are used instead; both are scored on every
// token.
#pragma once

#include <cstdint>
#include <vector>

#include "expert_layer.h"

namespace moelsp {

class ThreadPool;

class ExpertPredictor {
 public:
  ExpertPredictor(const ModelConfig& cfg, const std::vector<ExpertLayer>& layers);

  // The experts layer `target` will want for the m tokens whose residual
  // stream at an earlier layer is x [m][n_embd], without repeats: the router's
  // prediction, or the last token's experts there where those have scored
  // better. The router's prediction is kept for score().
  std::vector<int> predict(ThreadPool& pool, int target, const float* x, int64_t m);
  void forget(int layer);  // no prediction for this pass (a long prompt uses every expert)

  // How the predictions for layer `il` did against its routing, chosen [m][k].
  struct Hits {
    bool counted = false;   // a prediction and a baseline existed for every token
    int64_t tokens = 0;     // when counted: m
    int64_t predicted = 0;  // router-predicted experts that were chosen
    int64_t baseline = 0;   // the previous token's experts that were chosen
    int64_t used = 0;       // of the predictor predict() used
  };
  Hits score(int il, const int* chosen, int64_t m);

 private:
  const ModelConfig& cfg_;
  const std::vector<ExpertLayer>& layers_;
  std::vector<std::vector<int>> predicted_;        // per target layer: [m][k] for this pass's m tokens
  std::vector<std::vector<int>> last_;             // the last token's experts per layer (the baseline)
  std::vector<double> score_router_, score_prev_;  // running accuracy of each predictor per layer
};

}  // namespace moelsp
