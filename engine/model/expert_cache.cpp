#include "expert_cache.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "expert_pages.h"

namespace moelsp {

using namespace expert_pages;

HotExpertCache::HotExpertCache(const ModelConfig& cfg, const std::vector<ExpertLayer>& layers)
    : cfg_(cfg),
      layers_(layers),
      slot_of_(layers.size(), std::vector<int>(size_t(std::max(0, cfg.n_expert)), -1)),
      freq_(layers.size(), std::vector<double>(size_t(std::max(0, cfg.n_expert)), 0.0)) {}

HotExpertCache::~HotExpertCache() {
  if (slots_) munmap(slots_, slot_bytes_ * n_slots_);
}

void HotExpertCache::release() {
  for (const auto& [l, e] : owner_)
    if (l >= 0 && !slots_) lock_pages(l, e, false);
  if (slots_) munmap(slots_, slot_bytes_ * n_slots_);
  slots_ = nullptr;
  n_slots_ = 0;
  owner_.clear();
  for (auto& l : slot_of_) std::fill(l.begin(), l.end(), -1);
}

void HotExpertCache::configure(int64_t bytes, bool pin) {
  release();
  pinning_ = false;
  slot_bytes_ = 0;
  size_t moe_experts = 0;
  for (size_t l = 0; l < layers_.size(); ++l)
    if (layers_[l].moe) {
      size_t b = 0;
      for (const kernels::MatView& v : parts(int(l), 0)) b += mat_bytes(v);
      slot_bytes_ = std::max(slot_bytes_, b);
      moe_experts += size_t(cfg_.n_expert);
    }
  slot_bytes_ = (slot_bytes_ + 63) / 64 * 64;
  if (bytes <= 0 || slot_bytes_ == 0) return;
  const size_t n = std::min(size_t(bytes) / slot_bytes_, moe_experts);
  pinning_ = pin;
  if (n > 0 && (pinning_ || alloc_slots(n))) {
    n_slots_ = n;
    owner_.assign(n, {-1, -1});
  }
}

bool HotExpertCache::alloc_slots(size_t n) {
  void* p = mmap(nullptr, n * slot_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    spdlog::warn("expert cache: cannot map {} MiB for {} experts ({}): no hot-expert cache, every expert streams",
                 (n * slot_bytes_) >> 20, n, std::strerror(errno));
    return false;
  }
  slots_ = static_cast<uint8_t*>(p);
  return true;
}

std::array<kernels::MatView, 3> HotExpertCache::parts(int il, int e) const {
  const layers::MoeWeights& w = layers_[size_t(il)].weights;
  return {w.gate.slice(e), w.up.slice(e), w.down.slice(e)};
}

bool HotExpertCache::lock_pages(int il, int e, bool lock) {
  for (const kernels::MatView& v : parts(il, e)) {
    const Pages pg = pages(v);
    if ((lock ? mlock : munlock)(pg.p, pg.n) != 0) return false;
  }
  return true;
}

bool HotExpertCache::resident(int il, int e) const {
  std::vector<unsigned char> vec;
  for (const kernels::MatView& v : parts(il, e))
    if (!all_resident(pages(v), vec)) return false;
  return true;
}

void HotExpertCache::fall_back_to_copies() {
  // RLIMIT_MEMLOCK (8 MiB for users by default) or the cgroup refused.
  spdlog::warn(
      "expert cache: locking an expert's pages was refused ({}; raise RLIMIT_MEMLOCK to pin): "
      "copying the hot experts instead",
      std::strerror(errno));
  for (const auto& [l, x] : owner_)
    if (l >= 0) lock_pages(l, x, false);
  for (auto& lst : slot_of_) std::fill(lst.begin(), lst.end(), -1);
  std::fill(owner_.begin(), owner_.end(), std::pair{-1, -1});
  pinning_ = false;
  if (!alloc_slots(n_slots_)) {
    n_slots_ = 0;
    owner_.clear();
  }
}

void HotExpertCache::copy_in(int il, int e, int slot) {
  const auto [old_l, old_e] = owner_[size_t(slot)];
  if (!slots_) {
    // Pinning: lock the expert's pages where they are (no copy, no second
    // instance of its bytes); the slot's previous expert becomes evictable.
    if (old_l >= 0) lock_pages(old_l, old_e, false);
    if (!lock_pages(il, e, true)) {
      const int err = errno;
      lock_pages(il, e, false);
      errno = err;
      fall_back_to_copies();
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

int64_t HotExpertCache::count_uses(int il, const int* chosen, int64_t m) {
  const int k = cfg_.n_expert_used;
  int64_t hits = 0;
  for (int64_t i = 0; i < m * k; ++i) {
    hits += slot_of_[size_t(il)][size_t(chosen[i])] >= 0;
    freq_[size_t(il)][size_t(chosen[i])] += 1;
  }
  // Decay: counts halve every 64 tokens' worth of uses per layer, so the
  // cache follows what the code being written uses now.
  uses_since_decay_ += double(m * k);
  if (uses_since_decay_ > 64.0 * k * double(layers_.size())) {
    uses_since_decay_ = 0;
    for (auto& l : freq_)
      for (double& f : l) f *= 0.5;
  }
  return hits;
}

int HotExpertCache::swap_in_hottest(int max_swaps) {
  if (n_slots_ == 0) return 0;
  // The hottest expert not cached replaces the coldest cached one when
  // clearly hotter (hysteresis keeps two equals from trading places every step).
  int swaps = 0;
  for (int s = 0; s < max_swaps; ++s) {
    int hl = -1, he = -1;
    double hot = 0;
    for (size_t l = 0; l < freq_.size(); ++l)
      if (layers_[l].moe)
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
  return swaps;
}

HotExpertCache::Mats HotExpertCache::mats(int il, int e) const {
  const auto [gate, up, down] = parts(il, e);
  Mats r{gate, up, down};
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
