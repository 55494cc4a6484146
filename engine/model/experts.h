// Routed experts' bytes: where each expert is read from (the mapped file or a
// hot copy), which experts the next layers will want, and getting those bytes
// moving before they are needed. ExpertRuntime is what the model and the MoE
// layer call; it composes one part per job:
//
//   ExpertPredictor  (expert_predictor.h)  layer l+d's experts from layer l's residual stream
//   ExpertPrefetcher (expert_prefetch.h)   a thread that faults the predicted bytes in
//   HotExpertCache   (expert_cache.h)      the most-used experts pinned or copied in RAM
//   ExpertStats      (below)               the counters other threads read
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "expert_cache.h"
#include "expert_layer.h"
#include "expert_predictor.h"
#include "expert_prefetch.h"

namespace moelsp {

// The runtime's figures, written on the forward pass's thread and read from
// any (Model::expert_metrics): the one part with a lock.
class ExpertStats {
 public:
  ExpertStats(size_t n_layer, int k);
  void set_options(int distance, int64_t cache_experts, bool cache_pinned);
  void add(int il, const ExpertPredictor::Hits& h, int64_t routed, int64_t cache_hits);
  void add_swaps(int swaps, int64_t cache_experts, bool cache_pinned);
  void begin_forward();  // page-fault counts: the difference over a pass
  void end_forward();
  ExpertMetrics snapshot(const ExpertPrefetcher::Counters& c) const;
  void reset();

 private:
  mutable std::mutex mu_;
  ExpertMetrics m_;
  long fault_major0_ = 0, fault_minor0_ = 0;  // forward pass thread only
};

class ExpertRuntime {
 public:
  // layers[il]: what the runtime reads of layer il (ExpertLayer::moe false
  // for dense layers). [data_begin, data_end): the mapped tensor data.
  ExpertRuntime(const ModelConfig& cfg, std::vector<ExpertLayer> layers, const uint8_t* data_begin,
                const uint8_t* data_end);

  void configure(const ExpertOptions& o);
  const ExpertOptions& options() const { return opt_; }
  ExpertMetrics metrics() const { return stats_.snapshot(prefetcher_.counters()); }
  void reset_metrics();

  void begin_forward();  // swaps experts into the hot cache (between passes only)
  void end_forward();
  // x: the residual stream at layer il's FFN input, [m][n_embd].
  void predict(ThreadPool& pool, int il, const float* x, int64_t m);
  // chosen: layer il's routing, [m][k].
  void routed(int il, const int* chosen, int64_t m);

  using Mats = HotExpertCache::Mats;
  Mats mats(int il, int e) const { return cache_.mats(il, e); }

 private:
  void prefetch(int il, int e);

  // Declared first: the parts below keep references to these.
  const ModelConfig& cfg_;
  const std::vector<ExpertLayer> layers_;
  const uint8_t *data_begin_, *data_end_;
  ExpertOptions opt_;

  ExpertPredictor predictor_;
  HotExpertCache cache_;
  ExpertStats stats_;
  ExpertPrefetcher prefetcher_;  // last: its thread stops first
};

}  // namespace moelsp
