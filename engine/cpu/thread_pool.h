// A fixed pool of worker threads for data-parallel loops. The calling thread
// takes part, so ThreadPool(1) runs everything inline. One parallel_for at a
// time (the engine's single scheduler thread drives it).
//
// A decode step issues dozens of small loops; waking sleeping threads costs
// tens of microseconds each, so workers and the caller spin briefly (a few
// microseconds' worth of pause instructions) before falling back to the
// condition variable.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moelsp {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Splits [0, n) into one contiguous chunk per thread and runs
  // fn(begin, end) on each; returns when all are done.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker(int index);
  void run_chunk(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int> pending_{0};
};

// Physical cores of this machine (hyper-threads not counted), at least 1.
int physical_cores();

}  // namespace moelsp
