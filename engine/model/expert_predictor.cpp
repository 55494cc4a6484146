#include "expert_predictor.h"

namespace moelsp {

ExpertPredictor::ExpertPredictor(const ModelConfig& cfg, const std::vector<ExpertLayer>& layers)
    : cfg_(cfg),
      layers_(layers),
      predicted_(layers.size()),
      last_(layers.size()),
      score_router_(layers.size(), 0.0),
      score_prev_(layers.size(), 0.0) {}

void ExpertPredictor::forget(int layer) { predicted_[size_t(layer)].clear(); }

std::vector<int> ExpertPredictor::predict(ThreadPool& pool, int target, const float* x, int64_t m) {
  const size_t j = size_t(target);
  const ExpertLayer& L = layers_[j];
  const int k = cfg_.n_expert_used;
  std::vector<float> h(size_t(m) * size_t(cfg_.n_embd));  // [m][n_embd]: x under layer j's FFN norm
  layers::rms_norm(x, L.ffn_norm.data(), cfg_.n_embd, cfg_.rms_eps, h.data(), m);
  std::vector<int>& pred = predicted_[j];  // [m][k]
  pred.resize(size_t(m * k));
  std::vector<float> weight(size_t(m * k));
  layers::route(pool, cfg_, L.weights, h.data(), m, pred.data(), weight.data());
  // The previous token's experts where they have predicted better (a model
  // whose routing changes little between tokens), else the router's.
  const bool use_prev = score_prev_[j] > score_router_[j] && last_[j].size() == size_t(k);
  std::vector<int> out;
  std::vector<char> seen(size_t(cfg_.n_expert), 0);
  for (int e : use_prev ? last_[j] : pred)
    if (!seen[size_t(e)]) {
      seen[size_t(e)] = 1;
      out.push_back(e);
    }
  return out;
}

ExpertPredictor::Hits ExpertPredictor::score(int il, const int* chosen, int64_t m) {
  const size_t l = size_t(il);
  const int k = cfg_.n_expert_used;
  std::vector<int>& pred = predicted_[l];
  std::vector<int>& last = last_[l];
  const bool have_pred = pred.size() == size_t(m * k);
  const bool used_prev = score_prev_[l] > score_router_[l];  // as predict() chose
  int64_t p_hits = 0, b_hits = 0, b_tokens = 0;
  for (int64_t t = 0; t < m; ++t) {
    const int* now = chosen + t * k;
    const int* prev = t > 0 ? chosen + (t - 1) * k : (last.size() == size_t(k) ? last.data() : nullptr);
    if (!prev || !have_pred) continue;
    for (int a = 0; a < k; ++a)
      for (int b = 0; b < k; ++b) {
        p_hits += pred[size_t(t * k + b)] == now[a];
        b_hits += prev[b] == now[a];
      }
    ++b_tokens;
  }
  last.assign(chosen + (m - 1) * k, chosen + m * k);
  pred.clear();
  Hits h;
  if (!have_pred || b_tokens != m) return h;
  // Running accuracies (about the last 20 passes) choose the predictor per layer.
  const double n = double(m * k);
  score_router_[l] = 0.95 * score_router_[l] + 0.05 * double(p_hits) / n;
  score_prev_[l] = 0.95 * score_prev_[l] + 0.05 * double(b_hits) / n;
  // Counted only where both the prediction and the baseline exist, so the two compare on the same tokens.
  h.counted = true;
  h.tokens = m;
  h.predicted = p_hits;
  h.baseline = b_hits;
  h.used = used_prev ? b_hits : p_hits;
  return h;
}

}  // namespace moelsp
