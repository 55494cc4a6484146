// A MoE router's choice for one token, written once for the host and the CUDA
// device: the CPU engine's layers::route calls it per token, and the device
// kernel (kernels/cuda/route.cu) runs the same code, so both backends pick
// experts by one definition — gating, selection bias, group limit, top-k with
// ties to the lower index, renormalization and scale — which the reference
// logits of every MoE architecture check through the CPU engine.
//
// No standard headers beyond <cstdint> (the device has no others) and no allocation: the
// caller passes scratch of n_expert floats. Cost: O(k · n_expert) compares per
// token, ~1-2 k operations for 64-128 experts, nothing next to the router's
// matmul.
#pragma once

#include <cstdint>

#include "kernels/hd_blocks.h"  // MOELSP_HD

namespace moelsp::kernels::hd {

// Must match engine's Gating: probabilities by softmax over all experts, by a
// sigmoid each, or the chosen k's logits softmaxed after the choice.
enum class RouteGating : int { Softmax = 0, Sigmoid = 1, SoftmaxChosen = 2 };

struct RouteParams {
  int n_expert = 0, k = 0;
  RouteGating gating = RouteGating::Softmax;
  int n_group = 1, n_group_used = 1;  // n_group > 1: only the best n_group_used groups stay (at most kMaxGroups)
  bool norm = false;                  // divide the k weights by their sum
  float scale = 1.0f;                 // then multiply by this (0 or 1: none)
};
inline constexpr int kMaxGroups = 64;
inline constexpr int kMaxExperts = 1024;  // n_expert at most this, k at most n_expert

MOELSP_HD float exp_f(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return __builtin_expf(x);
#endif
}

MOELSP_HD bool route_before(float va, int a, float vb, int b) { return va > vb || (va == vb && a < b); }
MOELSP_HD float neg_inf() { return from_bits(0xff800000u); }

// p: the token's router logits [n_expert], replaced by its probabilities.
// bias: the selection bias [n_expert] or null. sel: scratch [n_expert].
// chosen [k] in order of selection score, weight [k] their combine weights.
MOELSP_HD void route_token(const RouteParams& r, float* p, const float* bias, float* sel, int* chosen, float* weight) {
  const int n = r.n_expert, k = r.k;
  if (r.gating == RouteGating::Softmax) {
    float mx = p[0];
    for (int e = 1; e < n; ++e) mx = p[e] > mx ? p[e] : mx;
    double s = 0;
    for (int e = 0; e < n; ++e) s += p[e] = exp_f(p[e] - mx);
    for (int e = 0; e < n; ++e) p[e] = float(p[e] / s);
  } else if (r.gating == RouteGating::Sigmoid) {
    for (int e = 0; e < n; ++e) p[e] = 1.0f / (1.0f + exp_f(-p[e]));
  }
  // Selection scores: probabilities plus the bias; the weights stay unbiased.
  for (int e = 0; e < n; ++e) sel[e] = p[e] + (bias ? bias[e] : 0.0f);
  if (r.n_group > 1) {
    // A group scores the sum of its two best; groups below the best
    // n_group_used (ties: the lower index first) are masked out.
    const int per = n / r.n_group;
    float score[kMaxGroups];
    for (int g = 0; g < r.n_group; ++g) {
      float best = neg_inf(), second = neg_inf();
      for (int e = g * per; e < (g + 1) * per; ++e) {
        if (sel[e] > best) {
          second = best;
          best = sel[e];
        } else if (sel[e] > second) {
          second = sel[e];
        }
      }
      score[g] = best + (per > 1 ? second : 0.0f);
    }
    for (int g = 0; g < r.n_group; ++g) {
      int rank = 0;
      for (int h = 0; h < r.n_group; ++h) rank += route_before(score[h], h, score[g], g);
      if (rank >= r.n_group_used)
        for (int e = g * per; e < (g + 1) * per; ++e) sel[e] = neg_inf();
    }
  }
  // Top k by (score, lower index). A NaN score (damaged weights) ranks as −∞,
  // so k distinct experts are always chosen and the damage is left to the
  // checks downstream, not to an index out of range here.
  for (int e = 0; e < n; ++e)
    if (sel[e] != sel[e]) sel[e] = neg_inf();
  uint64_t taken[kMaxExperts / 64] = {};
  double sum = 0;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < n; ++e)
      if (!(taken[e / 64] >> (e % 64) & 1) && (best < 0 || route_before(sel[e], e, sel[best], best))) best = e;
    chosen[j] = best;
    taken[best / 64] |= uint64_t(1) << (best % 64);
    weight[j] = p[best];
    sum += p[best];
  }
  if (r.gating == RouteGating::SoftmaxChosen) {  // softmax over the k chosen logits (the first is the largest)
    const float mx = weight[0];
    double s = 0;
    for (int j = 0; j < k; ++j) s += weight[j] = exp_f(weight[j] - mx);
    for (int j = 0; j < k; ++j) weight[j] = float(weight[j] / s);
  }
  if (r.norm) {
    const float inv = float(1.0 / (sum > 6.103515625e-5 ? sum : 6.103515625e-5));
    for (int j = 0; j < k; ++j) weight[j] *= inv;
  }
  if (r.scale != 0.0f && r.scale != 1.0f)
    for (int j = 0; j < k; ++j) weight[j] *= r.scale;
}

}  // namespace moelsp::kernels::hd
