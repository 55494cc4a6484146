#include "experts.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>

#include "expert_pages.h"

namespace moelsp {

namespace {

constexpr int64_t kPrefillTokens = 32;  // above this a layer uses nearly every expert: request them all

// Σ num / Σ den over the layers (den scaled by `k`: tokens × k uses).
double ratio(const std::vector<ExpertLayerMetrics>& layers, int64_t ExpertLayerMetrics::*num,
             int64_t ExpertLayerMetrics::*den, int k) {
  int64_t n = 0, d = 0;
  for (const auto& l : layers) {
    n += l.*num;
    d += l.*den * k;
  }
  return d ? double(n) / double(d) : 0;
}

}  // namespace

double ExpertMetrics::accuracy() const {
  return ratio(layers, &ExpertLayerMetrics::predicted_hits, &ExpertLayerMetrics::tokens, k);
}
double ExpertMetrics::baseline_accuracy() const {
  return ratio(layers, &ExpertLayerMetrics::baseline_hits, &ExpertLayerMetrics::tokens, k);
}
double ExpertMetrics::chosen_accuracy() const {
  return ratio(layers, &ExpertLayerMetrics::chosen_hits, &ExpertLayerMetrics::tokens, k);
}
double ExpertMetrics::cache_hit_rate() const {
  return ratio(layers, &ExpertLayerMetrics::cache_hits, &ExpertLayerMetrics::routed, 1);
}

// ---- ExpertStats

ExpertStats::ExpertStats(size_t n_layer, int k) {
  m_.layers.resize(n_layer);
  m_.k = k;
}

void ExpertStats::set_options(int distance, int64_t cache_experts, bool cache_pinned) {
  std::lock_guard lock(mu_);
  m_.distance = distance;
  m_.cache_experts = cache_experts;
  m_.cache_pinned = cache_pinned;
}

void ExpertStats::add(int il, const ExpertPredictor::Hits& h, int64_t routed, int64_t cache_hits) {
  std::lock_guard lock(mu_);
  ExpertLayerMetrics& lm = m_.layers[size_t(il)];
  if (h.counted) {
    lm.tokens += h.tokens;
    lm.predicted_hits += h.predicted;
    lm.baseline_hits += h.baseline;
    lm.chosen_hits += h.used;
  }
  lm.routed += routed;
  lm.cache_hits += cache_hits;
}

void ExpertStats::add_swaps(int swaps, int64_t cache_experts, bool cache_pinned) {
  std::lock_guard lock(mu_);
  m_.cache_swaps += swaps;
  m_.cache_experts = cache_experts;
  m_.cache_pinned = cache_pinned;
}

void ExpertStats::begin_forward() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  fault_major0_ = ru.ru_majflt;
  fault_minor0_ = ru.ru_minflt;
}

void ExpertStats::end_forward() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::lock_guard lock(mu_);
  m_.major_faults += ru.ru_majflt - fault_major0_;
  m_.minor_faults += ru.ru_minflt - fault_minor0_;
  ++m_.forwards;
}

ExpertMetrics ExpertStats::snapshot(const ExpertPrefetcher::Counters& c) const {
  std::lock_guard lock(mu_);
  ExpertMetrics r = m_;
  r.prefetch_requests = c.requests;
  r.prefetch_bytes = c.bytes;
  r.prefetch_missing_bytes = c.missing_bytes;
  return r;
}

void ExpertStats::reset() {
  std::lock_guard lock(mu_);
  ExpertMetrics fresh;
  fresh.layers.resize(m_.layers.size());
  fresh.k = m_.k;
  fresh.distance = m_.distance;
  fresh.cache_experts = m_.cache_experts;
  fresh.cache_pinned = m_.cache_pinned;
  m_ = std::move(fresh);
}

// ---- ExpertRuntime

ExpertRuntime::ExpertRuntime(const ModelConfig& cfg, std::vector<ExpertLayer> layers, const uint8_t* data_begin,
                             const uint8_t* data_end)
    : cfg_(cfg),
      layers_(std::move(layers)),
      data_begin_(data_begin),
      data_end_(data_end),
      predictor_(cfg_, layers_),
      cache_(cfg_, layers_),
      stats_(layers_.size(), cfg_.n_expert_used),
      // Behind by more than a few layers' worth: the oldest requests are for layers already computed.
      prefetcher_(size_t(24 * std::max(1, cfg_.n_expert_used))) {}

void ExpertRuntime::configure(const ExpertOptions& o) {
  opt_ = o;
  opt_.distance = std::max(1, o.distance);
  // Repacked experts (Model::repack_experts) no longer read the file's pages of them.
  const bool repacked = std::any_of(layers_.begin(), layers_.end(),
                                    [](const ExpertLayer& l) { return l.moe && l.weights.gate.m.row_group > 1; });
  if (o.populate && !repacked && data_end_ > data_begin_) {
    // The whole file's pages, read ahead by the kernel while the first request tokenizes.
    const expert_pages::Pages pg = expert_pages::pages(data_begin_, size_t(data_end_ - data_begin_));
    madvise(pg.p, pg.n, MADV_WILLNEED);
  }
  cache_.configure(o.cache_bytes, o.pin);
  stats_.set_options(opt_.distance, int64_t(cache_.n_slots()), cache_.pinning());
}

void ExpertRuntime::reset_metrics() {
  stats_.reset();
  prefetcher_.reset_counters();
}

void ExpertRuntime::begin_forward() {
  stats_.begin_forward();
  const int swaps = cache_.swap_in_hottest(opt_.cache_swaps_per_step);
  if (swaps) stats_.add_swaps(swaps, int64_t(cache_.n_slots()), cache_.pinning());
}

void ExpertRuntime::end_forward() { stats_.end_forward(); }

void ExpertRuntime::prefetch(int il, int e) {
  if (cache_.holds(il, e)) return;  // nothing to fetch
  const layers::MoeWeights& w = layers_[size_t(il)].weights;
  for (const kernels::MatView& v : {w.gate.slice(e), w.up.slice(e), w.down.slice(e)})
    prefetcher_.request(v.row(0), expert_pages::mat_bytes(v));
}

void ExpertRuntime::predict(ThreadPool& pool, int il, const float* x, int64_t m) {
  if (!opt_.predict && !opt_.prefetch) return;
  const int j = il + opt_.distance;
  if (j >= int(layers_.size()) || !layers_[size_t(j)].moe) return;
  if (m > kPrefillTokens) {
    predictor_.forget(j);
    if (opt_.prefetch) {
      for (int e = 0; e < cfg_.n_expert; ++e) prefetch(j, e);
      prefetcher_.wake();
    }
    return;
  }
  const std::vector<int> experts = predictor_.predict(pool, j, x, m);
  if (opt_.prefetch) {
    for (int e : experts) prefetch(j, e);
    prefetcher_.wake();
  }
}

void ExpertRuntime::routed(int il, const int* chosen, int64_t m) {
  const ExpertPredictor::Hits h = predictor_.score(il, chosen, m);
  const int64_t cache_hits = cache_.count_uses(il, chosen, m);
  stats_.add(il, h, m * cfg_.n_expert_used, cache_hits);
}

}  // namespace moelsp
