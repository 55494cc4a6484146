// The hot-expert cache: the most-routed experts (decayed use counts) held in
// RAM whatever the streaming evicts — by locking their pages of the mapped
// file (mlock: no copy, no second instance of the bytes), or, where the lock
// limit refuses, by copies in anonymous memory. With a memory limit the page
// cache keeps what was used recently; this keeps what is used often.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "expert_layer.h"

namespace moelsp {

class HotExpertCache {
 public:
  HotExpertCache(const ModelConfig& cfg, const std::vector<ExpertLayer>& layers);
  ~HotExpertCache();  // frees the copies; locked pages unlock with the file's mapping
  HotExpertCache(const HotExpertCache&) = delete;
  HotExpertCache& operator=(const HotExpertCache&) = delete;

  // Room for `bytes` of experts, by pinning when `pin`; empties the cache.
  void configure(int64_t bytes, bool pin);
  size_t n_slots() const { return n_slots_; }
  bool pinning() const { return pinning_ && n_slots_ > 0; }

  bool holds(int il, int e) const { return slot_of_[size_t(il)][size_t(e)] >= 0; }
  // Counts layer il's routing, chosen [m][k], toward the use counts; returns
  // how many of the m·k uses the cache held.
  int64_t count_uses(int il, const int* chosen, int64_t m);
  // Up to `max_swaps` of the hottest uncached experts replace colder cached
  // ones (between forward passes only); returns the swaps made.
  int swap_in_hottest(int max_swaps);

  struct Mats {
    kernels::MatView gate, up, down;
  };
  Mats mats(int il, int e) const;  // a held copy, else the file's bytes

 private:
  std::array<kernels::MatView, 3> parts(int il, int e) const;  // the expert's gate, up, down in the file
  bool resident(int il, int e) const;                          // are all its pages in memory (mincore)?
  bool lock_pages(int il, int e, bool lock);
  bool alloc_slots(size_t n);
  void copy_in(int il, int e, int slot);  // into a slot: pins its pages, or copies them
  void fall_back_to_copies();             // the lock limit refused: unlock all, copy from now on
  void release();

  const ModelConfig& cfg_;
  const std::vector<ExpertLayer>& layers_;
  bool pinning_ = false;  // experts held by mlock of their file pages (slots_ unused)
  uint8_t* slots_ = nullptr;
  size_t slot_bytes_ = 0, n_slots_ = 0;
  std::vector<std::vector<int>> slot_of_;   // [layer][expert] → slot or −1
  std::vector<std::pair<int, int>> owner_;  // slot → (layer, expert) or (−1, −1)
  std::vector<std::vector<double>> freq_;   // [layer][expert]: decayed uses
  double uses_since_decay_ = 0;
};

}  // namespace moelsp
