// The prefetch thread: byte ranges of experts the next layers will want go to
// a helper thread that madvise(MADV_WILLNEED)s them and touches each page, so
// the page faults of a streamed model are taken there, overlapping the
// compute of the layers in between.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

namespace moelsp {

class ExpertPrefetcher {
 public:
  // At most `max_queued` ranges wait: when the thread falls further behind,
  // the oldest (for layers already computed) are dropped.
  explicit ExpertPrefetcher(size_t max_queued);
  ~ExpertPrefetcher();  // stops and joins the thread
  ExpertPrefetcher(const ExpertPrefetcher&) = delete;
  ExpertPrefetcher& operator=(const ExpertPrefetcher&) = delete;

  void request(const uint8_t* p, size_t n);  // queues; wake() starts the work
  void wake();

  struct Counters {
    int64_t requests = 0, bytes = 0;  // ranges requested
    int64_t missing_bytes = 0;        // of those, pages not in memory (what was read ahead)
  };
  Counters counters() const;  // from any thread
  void reset_counters();

 private:
  struct Range {
    const uint8_t* p;
    size_t n;
  };
  void loop();

  const size_t max_queued_;
  std::atomic<int64_t> requests_{0}, bytes_{0}, missing_bytes_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Range> queue_;
  bool stop_ = false;
  std::thread worker_;  // last: starts once the members above exist
};

}  // namespace moelsp
