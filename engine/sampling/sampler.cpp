#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "engine/sampling.h"

namespace moelsp {

namespace {

// Repeat, frequency and presence penalties over the recent window, on the
// candidates' logits (cand[t] is token t's).
void penalise(const SamplingParams& p, std::span<const TokenId> history, std::vector<std::pair<float, TokenId>>& cand) {
  const bool any = p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if (!any || history.empty()) return;
  const size_t n = p.penalty_last_n < 0 ? history.size() : std::min(history.size(), size_t(p.penalty_last_n));
  std::unordered_map<TokenId, int> count;
  for (TokenId t : history.subspan(history.size() - n)) ++count[t];
  for (const auto& [t, c] : count) {
    if (t < 0 || size_t(t) >= cand.size()) continue;
    float& l = cand[size_t(t)].first;
    l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
    l -= float(c) * p.frequency_penalty + p.presence_penalty;
  }
}

// How many of the sorted candidates (probabilities `prob`, n of them) stay:
// top-p, the smallest prefix reaching p; then min-p, those at least min_p ×
// the best probability.
size_t truncate(const SamplingParams& p, const std::vector<double>& prob, size_t n) {
  if (p.top_p < 1.0f) {
    double acc = 0;
    for (size_t i = 0; i < n; ++i) {
      acc += prob[i];
      if (acc >= p.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    size_t keep = 1;
    while (keep < n && prob[keep] >= p.min_p * prob[0]) ++keep;
    n = keep;
  }
  return n;
}

}  // namespace

Sampler::Sampler(const SamplingParams& p, int n_vocab) : p_(p), n_vocab_(n_vocab), rng_(p.seed) {}

TokenId Sampler::sample(const float* logits, std::span<const TokenId> history) {
  cand_.resize(size_t(n_vocab_));
  for (int i = 0; i < n_vocab_; ++i) cand_[size_t(i)] = {logits[i], TokenId(i)};
  penalise(p_, history, cand_);

  if (p_.temperature <= 0.0f) {
    return std::max_element(cand_.begin(), cand_.end(),
                            [](const auto& a, const auto& b) {
                              return a.first < b.first || (a.first == b.first && a.second > b.second);
                            })
        ->second;
  }

  // Sort candidates (only the top-k when set) by logit, ties by id for determinism.
  const auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t n = cand_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    n = size_t(p_.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // Softmax of the kept candidates.
  std::vector<double> prob(n);
  const double mx = cand_[0].first;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += prob[i] = std::exp(double(cand_[i].first) - mx);
  for (auto& q : prob) q /= sum;
  n = truncate(p_, prob, n);
  // Temperature on the survivors, then draw.
  std::vector<double> w(n);
  double wsum = 0;
  for (size_t i = 0; i < n; ++i) wsum += w[i] = std::exp((double(cand_[i].first) - mx) / p_.temperature);
  std::uniform_real_distribution<double> u(0.0, wsum);
  double r = u(rng_);
  for (size_t i = 0; i < n; ++i) {
    r -= w[i];
    if (r <= 0) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

}  // namespace moelsp
