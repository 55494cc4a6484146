#include "expert_prefetch.h"

#include <sys/mman.h>

#include <algorithm>
#include <vector>

#include "expert_pages.h"

namespace moelsp {

using namespace expert_pages;

ExpertPrefetcher::ExpertPrefetcher(size_t max_queued)
    : max_queued_(std::max<size_t>(1, max_queued)), worker_([this] { loop(); }) {}

ExpertPrefetcher::~ExpertPrefetcher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void ExpertPrefetcher::request(const uint8_t* p, size_t n) {
  std::lock_guard lock(mu_);
  queue_.push_back({p, n});
  requests_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(int64_t(n), std::memory_order_relaxed);
  while (queue_.size() > max_queued_) queue_.pop_front();
}

void ExpertPrefetcher::wake() { cv_.notify_one(); }

ExpertPrefetcher::Counters ExpertPrefetcher::counters() const {
  return {requests_.load(std::memory_order_relaxed), bytes_.load(std::memory_order_relaxed),
          missing_bytes_.load(std::memory_order_relaxed)};
}

void ExpertPrefetcher::reset_counters() {
  requests_ = 0;
  bytes_ = 0;
  missing_bytes_ = 0;
}

void ExpertPrefetcher::loop() {
  const size_t ps = page_size();
  for (;;) {
    Range r{};
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      r = queue_.front();
      queue_.pop_front();
    }
    const Pages pg = pages(r.p, r.n);
    // How much of it was not in memory: what the prefetch actually reads.
    std::vector<unsigned char> vec;
    if (all_resident(pg, vec)) continue;
    missing_bytes_.fetch_add(
        int64_t(std::count_if(vec.begin(), vec.end(), [](unsigned char c) { return !(c & 1); })) * int64_t(ps),
        std::memory_order_relaxed);
    madvise(pg.p, pg.n, MADV_WILLNEED);
    // Touch every page: the faults (and the wait for the disk) happen here, not in the kernels.
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < pg.n; i += ps) sink = sink + static_cast<const volatile uint8_t*>(pg.p)[i];
    (void)sink;
  }
}

}  // namespace moelsp
