#include "experts.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace moelsp {

namespace {

constexpr int64_t kPrefillTokens = 32;  // above this a layer uses nearly every expert: request them all

size_t page_size() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

size_t mat_bytes(const kernels::MatView& v) { return size_t(v.rows) * v.row_bytes; }

// [p, p + n) widened to whole pages (what madvise/mlock/mincore take).
struct Pages {
  void* p;
  size_t n;
  size_t count() const { return n / page_size(); }
};
Pages pages(const void* p, size_t n) {
  const size_t ps = page_size();
  const auto a = reinterpret_cast<uintptr_t>(p) & ~(ps - 1);
  const auto b = (reinterpret_cast<uintptr_t>(p) + n + ps - 1) & ~(ps - 1);
  return {reinterpret_cast<void*>(a), b - a};
}
Pages pages(const kernels::MatView& v) { return pages(v.row(0), mat_bytes(v)); }

// Are all of them in memory? (true when the kernel cannot tell)
bool all_resident(Pages pg, std::vector<unsigned char>& vec) {
  vec.resize(pg.count());
  if (mincore(pg.p, pg.n, vec.data()) != 0) return true;
  return std::all_of(vec.begin(), vec.end(), [](unsigned char c) { return c & 1; });
}

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

ExpertRuntime::ExpertRuntime(const ModelConfig& cfg, std::vector<const layers::MoeWeights*> moe,
                             std::vector<const float*> ffn_norm, const uint8_t* data_begin, const uint8_t* data_end)
    : cfg_(cfg), moe_(std::move(moe)), norm_(std::move(ffn_norm)), data_begin_(data_begin), data_end_(data_end) {
  const size_t L = moe_.size(), E = size_t(std::max(0, cfg_.n_expert));
  predicted_.resize(L);
  last_.resize(L);
  score_router_.assign(L, 0.0);
  score_prev_.assign(L, 0.0);
  slot_of_.assign(L, std::vector<int>(E, -1));
  freq_.assign(L, std::vector<double>(E, 0.0));
  m_.layers.resize(L);
  m_.k = cfg_.n_expert_used;
  worker_ = std::thread([this] { prefetch_loop(); });
}

ExpertRuntime::~ExpertRuntime() {
  {
    std::lock_guard lock(q_mu_);
    stop_ = true;
  }
  q_cv_.notify_all();
  worker_.join();
  // Not release_cache(): the layers (moe_) may already be gone — the
  // architecture's members die before the Model base holding this — and the
  // pinned pages unlock when the file is unmapped.
  if (slots_) munmap(slots_, slot_bytes_ * n_slots_);
}

void ExpertRuntime::release_cache() {
  for (const auto& [l, e] : owner_)
    if (l >= 0 && !slots_) lock_pages(l, e, false);
  if (slots_) munmap(slots_, slot_bytes_ * n_slots_);
  slots_ = nullptr;
  n_slots_ = 0;
  owner_.clear();
  for (auto& l : slot_of_) std::fill(l.begin(), l.end(), -1);
}

void ExpertRuntime::configure(const ExpertOptions& o) {
  opt_ = o;
  opt_.distance = std::max(1, o.distance);
  if (o.populate && data_end_ > data_begin_) {
    // The whole file's pages, read ahead by the kernel while the first request tokenizes.
    const Pages pg = pages(data_begin_, size_t(data_end_ - data_begin_));
    madvise(pg.p, pg.n, MADV_WILLNEED);
  }
  release_cache();
  pinning_ = false;
  slot_bytes_ = 0;
  for (size_t l = 0; l < moe_.size(); ++l)
    if (moe_[l]) {
      size_t bytes = 0;
      for (const kernels::MatView& v : parts(int(l), 0)) bytes += mat_bytes(v);
      slot_bytes_ = std::max(slot_bytes_, bytes);
    }
  slot_bytes_ = (slot_bytes_ + 63) / 64 * 64;
  if (o.cache_bytes > 0 && slot_bytes_ > 0) {
    size_t n = size_t(o.cache_bytes / slot_bytes_);
    size_t moe_experts = 0;
    for (const auto* w : moe_) moe_experts += w ? size_t(cfg_.n_expert) : 0;
    n = std::min(n, moe_experts);
    pinning_ = o.pin;
    if (n > 0 && (pinning_ || alloc_slots(n))) {
      n_slots_ = n;
      owner_.assign(n, {-1, -1});
    }
  }
  std::lock_guard lock(mu_);
  m_.distance = opt_.distance;
  m_.cache_experts = int64_t(n_slots_);
  m_.cache_pinned = pinning_ && n_slots_ > 0;
}

bool ExpertRuntime::alloc_slots(size_t n) {
  void* p = mmap(nullptr, n * slot_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    spdlog::warn("expert cache: cannot map {} MiB for {} experts ({}): no hot-expert cache, every expert streams",
                 (n * slot_bytes_) >> 20, n, std::strerror(errno));
    return false;
  }
  slots_ = static_cast<uint8_t*>(p);
  return true;
}

std::array<kernels::MatView, 3> ExpertRuntime::parts(int il, int e) const {
  const layers::MoeWeights& w = *moe_[size_t(il)];
  return {w.gate.slice(e), w.up.slice(e), w.down.slice(e)};
}

bool ExpertRuntime::lock_pages(int il, int e, bool lock) {
  for (const kernels::MatView& v : parts(il, e)) {
    const Pages pg = pages(v);
    if ((lock ? mlock : munlock)(pg.p, pg.n) != 0) return false;
  }
  return true;
}

ExpertMetrics ExpertRuntime::metrics() const {
  std::lock_guard lock(mu_);
  ExpertMetrics r = m_;
  r.prefetch_requests = prefetch_requests_.load(std::memory_order_relaxed);
  r.prefetch_bytes = prefetch_bytes_.load(std::memory_order_relaxed);
  r.prefetch_missing_bytes = prefetch_missing_bytes_.load(std::memory_order_relaxed);
  return r;
}

void ExpertRuntime::reset_metrics() {
  std::lock_guard lock(mu_);
  const int64_t cached = m_.cache_experts;
  const bool pinned = m_.cache_pinned;
  m_ = ExpertMetrics{};
  m_.cache_pinned = pinned;
  m_.layers.resize(moe_.size());
  m_.k = cfg_.n_expert_used;
  m_.distance = opt_.distance;
  m_.cache_experts = cached;
  prefetch_requests_ = 0;
  prefetch_bytes_ = 0;
  prefetch_missing_bytes_ = 0;
}

void ExpertRuntime::copy_in(int il, int e, int slot) {
  const auto [old_l, old_e] = owner_[size_t(slot)];
  if (!slots_) {
    // Pinning: lock the expert's pages where they are (no copy, no second
    // instance of its bytes); the slot's previous expert becomes evictable.
    if (old_l >= 0) lock_pages(old_l, old_e, false);
    if (!lock_pages(il, e, true)) {
      // RLIMIT_MEMLOCK (8 MiB for users by default) or the cgroup refused:
      // copies instead, from now on.
      spdlog::warn(
          "expert cache: locking an expert's pages was refused ({}; raise RLIMIT_MEMLOCK to pin): "
          "copying the hot experts instead",
          std::strerror(errno));
      lock_pages(il, e, false);
      for (const auto& [l, x] : owner_)
        if (l >= 0) lock_pages(l, x, false);
      for (auto& lst : slot_of_) std::fill(lst.begin(), lst.end(), -1);
      std::fill(owner_.begin(), owner_.end(), std::pair{-1, -1});
      pinning_ = false;
      if (!alloc_slots(n_slots_)) {
        n_slots_ = 0;
        owner_.clear();
      }
      std::lock_guard lock(mu_);
      m_.cache_pinned = false;
      m_.cache_experts = int64_t(n_slots_);
      return;
    }
  } else {
    uint8_t* dst = slots_ + size_t(slot) * slot_bytes_;
    for (const kernels::MatView& v : parts(il, e)) {
      std::memcpy(dst, v.row(0), mat_bytes(v));
      dst += mat_bytes(v);
    }
  }
  if (old_l >= 0) slot_of_[size_t(old_l)][size_t(old_e)] = -1;
  owner_[size_t(slot)] = {il, e};
  slot_of_[size_t(il)][size_t(e)] = slot;
}

bool ExpertRuntime::resident(int il, int e) const {
  std::vector<unsigned char> vec;
  for (const kernels::MatView& v : parts(il, e))
    if (!all_resident(pages(v), vec)) return false;
  return true;
}

void ExpertRuntime::begin_forward() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  fault_major0_ = ru.ru_majflt;
  fault_minor0_ = ru.ru_minflt;
  if (n_slots_ == 0) return;
  // A few swaps per pass: the hottest expert not cached replaces the coldest
  // cached one when clearly hotter (hysteresis keeps two equals from
  // trading places every step).
  int swaps = 0;
  for (int s = 0; s < opt_.cache_swaps_per_step; ++s) {
    int hl = -1, he = -1;
    double hot = 0;
    for (size_t l = 0; l < freq_.size(); ++l)
      if (moe_[l])
        for (size_t e = 0; e < freq_[l].size(); ++e)
          if (slot_of_[l][e] < 0 && freq_[l][e] > hot) {
            hot = freq_[l][e];
            hl = int(l);
            he = int(e);
          }
    if (hl < 0) break;
    int victim = -1;
    double cold = 0;
    for (size_t slot = 0; slot < n_slots_; ++slot) {
      const auto [l, e] = owner_[slot];
      if (l < 0) {
        victim = int(slot);
        cold = -1;
        break;
      }
      if (victim < 0 || freq_[size_t(l)][size_t(e)] < cold) {
        victim = int(slot);
        cold = freq_[size_t(l)][size_t(e)];
      }
    }
    if (cold >= 0 && hot <= cold * 1.5 + 1) break;
    // Only from pages already in memory: a copy that waits for the disk would
    // stall this pass (the expert was just used, so its pages usually are).
    if (!resident(hl, he)) {
      freq_[size_t(hl)][size_t(he)] *= 0.5;  // try another; this one comes back when used again
      continue;
    }
    copy_in(hl, he, victim);
    if (n_slots_ == 0) break;
    ++swaps;
  }
  if (swaps) {
    std::lock_guard lock(mu_);
    m_.cache_swaps += swaps;
  }
}

void ExpertRuntime::end_forward() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::lock_guard lock(mu_);
  m_.major_faults += ru.ru_majflt - fault_major0_;
  m_.minor_faults += ru.ru_minflt - fault_minor0_;
  ++m_.forwards;
}

void ExpertRuntime::request(int il, int e) {
  if (slot_of_[size_t(il)][size_t(e)] >= 0) return;  // held by the hot cache: nothing to fetch
  std::lock_guard lock(q_mu_);
  for (const kernels::MatView& v : parts(il, e)) {
    queue_.push_back({v.row(0), mat_bytes(v)});
    prefetch_requests_.fetch_add(1, std::memory_order_relaxed);
    prefetch_bytes_.fetch_add(int64_t(mat_bytes(v)), std::memory_order_relaxed);
  }
  // Behind by more than a few layers' worth: the oldest requests are for layers already computed.
  while (queue_.size() > size_t(24 * std::max(1, cfg_.n_expert_used))) queue_.pop_front();
}

void ExpertRuntime::prefetch_loop() {
  const size_t ps = page_size();
  for (;;) {
    Range r{};
    {
      std::unique_lock lock(q_mu_);
      q_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      r = queue_.front();
      queue_.pop_front();
    }
    const Pages pg = pages(r.p, r.n);
    // How much of it was not in memory: what the prefetch actually reads.
    std::vector<unsigned char> vec;
    if (all_resident(pg, vec)) continue;
    prefetch_missing_bytes_.fetch_add(
        int64_t(std::count_if(vec.begin(), vec.end(), [](unsigned char c) { return !(c & 1); })) * int64_t(ps),
        std::memory_order_relaxed);
    madvise(pg.p, pg.n, MADV_WILLNEED);
    // Touch every page: the faults (and the wait for the disk) happen here, not in the kernels.
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < pg.n; i += ps) sink = sink + static_cast<const volatile uint8_t*>(pg.p)[i];
    (void)sink;
  }
}

void ExpertRuntime::predict(ThreadPool& pool, int il, const float* x, int64_t m) {
  if (!opt_.predict && !opt_.prefetch) return;
  const int j = il + opt_.distance;
  if (j >= int(moe_.size()) || !moe_[size_t(j)]) return;
  const int k = cfg_.n_expert_used;
  if (m > kPrefillTokens) {
    predicted_[size_t(j)].clear();
    if (opt_.prefetch) {
      for (int e = 0; e < cfg_.n_expert; ++e) request(j, e);
      q_cv_.notify_one();
    }
    return;
  }
  std::vector<float> h(size_t(m) * size_t(cfg_.n_embd));
  layers::rms_norm(x, norm_[size_t(j)], cfg_.n_embd, cfg_.rms_eps, h.data(), m);
  std::vector<int>& pred = predicted_[size_t(j)];
  pred.resize(size_t(m * k));
  std::vector<float> weight(size_t(m * k));
  layers::route(pool, cfg_, *moe_[size_t(j)], h.data(), m, pred.data(), weight.data());
  if (opt_.prefetch) {
    // The previous token's experts where they have predicted better (a model
    // whose routing changes little between tokens), else the router's.
    const bool use_prev = score_prev_[size_t(j)] > score_router_[size_t(j)] && last_[size_t(j)].size() == size_t(k);
    std::vector<char> seen(size_t(cfg_.n_expert), 0);
    for (int e : use_prev ? last_[size_t(j)] : pred)
      if (!seen[size_t(e)]) {
        seen[size_t(e)] = 1;
        request(j, e);
      }
    q_cv_.notify_one();
  }
}

void ExpertRuntime::routed(int il, const int* chosen, int64_t m) {
  const int k = cfg_.n_expert_used;
  std::vector<int>& pred = predicted_[size_t(il)];
  std::vector<int>& last = last_[size_t(il)];
  const bool have_pred = pred.size() == size_t(m * k);
  const bool used_prev = score_prev_[size_t(il)] > score_router_[size_t(il)];  // as predict() chose
  int64_t p_hits = 0, b_hits = 0, c_hits = 0, b_tokens = 0;
  for (int64_t t = 0; t < m; ++t) {
    const int* now = chosen + t * k;
    const int* prev = t > 0 ? chosen + (t - 1) * k : (last.size() == size_t(k) ? last.data() : nullptr);
    for (int a = 0; a < k; ++a) {
      if (have_pred)
        for (int b = 0; b < k; ++b) p_hits += pred[size_t(t * k + b)] == now[a];
      if (prev && have_pred)
        for (int b = 0; b < k; ++b) b_hits += prev[b] == now[a];
      c_hits += slot_of_[size_t(il)][size_t(now[a])] >= 0;
      freq_[size_t(il)][size_t(now[a])] += 1;
    }
    b_tokens += prev && have_pred;
  }
  last.assign(chosen + (m - 1) * k, chosen + m * k);
  pred.clear();
  // Decay: counts halve every 64 tokens' worth of uses per layer, so the cache follows what the code being written uses
  // now.
  uses_since_decay_ += double(m * k);
  if (uses_since_decay_ > 64.0 * k * double(moe_.size())) {
    uses_since_decay_ = 0;
    for (auto& l : freq_)
      for (double& f : l) f *= 0.5;
  }
  if (have_pred && b_tokens == m) {
    // Running accuracies (about the last 20 passes) choose the predictor per layer.
    const double n = double(m * k);
    score_router_[size_t(il)] = 0.95 * score_router_[size_t(il)] + 0.05 * double(p_hits) / n;
    score_prev_[size_t(il)] = 0.95 * score_prev_[size_t(il)] + 0.05 * double(b_hits) / n;
  }
  std::lock_guard lock(mu_);
  ExpertLayerMetrics& lm = m_.layers[size_t(il)];
  if (have_pred && b_tokens == m) {
    // Counted only where both the prediction and the baseline exist, so the two compare on the same tokens.
    lm.tokens += m;
    lm.predicted_hits += p_hits;
    lm.baseline_hits += b_hits;
    lm.chosen_hits += used_prev ? b_hits : p_hits;
  }
  lm.routed += m * k;
  lm.cache_hits += c_hits;
}

ExpertRuntime::Mats ExpertRuntime::mats(int il, int e) const {
  const layers::MoeWeights& w = *moe_[size_t(il)];
  Mats r{w.gate.slice(e), w.up.slice(e), w.down.slice(e)};
  const int slot = slot_of_[size_t(il)][size_t(e)];
  if (slot >= 0 && slots_) {  // a copy (pinned experts are read where they are)
    uint8_t* p = slots_ + size_t(slot) * slot_bytes_;
    for (kernels::MatView* v : {&r.gate, &r.up, &r.down}) {
      v->data = p;
      p += mat_bytes(*v);
    }
  }
  return r;
}

}  // namespace moelsp
