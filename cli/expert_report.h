// Expert routing as a picture: per MoE layer, the share of routed tokens each
// expert took, as an SVG heatmap (layers × experts) with each layer's figures
// beside its row, and the same data as CSV and JSON. `moelsp experts` writes
// them after running a text; the HTTP server draws the live model's at
// /experts.svg (and /experts.json).
//
// Per layer: entropy (the routing distribution's, over log(experts): 1 =
// uniform), max/mean (the busiest expert's tokens over the mean: 1 = even, a
// hot expert shows as a large number), dead (experts that got no token), and
// the thread-load imbalance of the expert work, (max − min) / max.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model.h"

namespace moelsp::cli {

struct LayerUsage {
  int layer = 0;
  std::vector<int64_t> tokens{};  // per expert: routed tokens
  double entropy = 0, thread_imbalance = 0;
  int64_t total() const;
  double max_over_mean() const;  // 0 without tokens
  int dead() const;
};

struct ExpertReport {
  std::string model, source;  // shown in the title (file names)
  int n_expert = 0, n_expert_used = 0;
  std::vector<LayerUsage> layers;  // MoE layers only, in order
};

// The MoE layers' statistics of `model` since its last reset_moe_stats().
ExpertReport expert_report(const Model& model, std::string model_name, std::string source);

std::string heatmap_svg(const ExpertReport& r);
std::string report_csv(const ExpertReport& r);   // layer,expert,tokens,share
std::string report_json(const ExpertReport& r);  // {model, source, experts, used, layers: [{layer, tokens[], …}]}

}  // namespace moelsp::cli
